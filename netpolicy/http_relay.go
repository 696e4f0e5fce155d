package netpolicy

import (
	"bufio"
	"io"
	"net/http"
	"net/textproto"
	"strings"
)

// hopHeaders apply to one connection only and are never forwarded (RFC
// 9110 section 7.6.1), nor is any Proxy-* header.
var hopHeaders = []string{"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade"}

func removeHopHeaders(h http.Header) {
	for _, f := range h.Values("Connection") {
		for _, name := range strings.Split(f, ",") {
			if name = textproto.TrimString(name); name != "" {
				h.Del(name)
			}
		}
	}
	for _, name := range hopHeaders {
		h.Del(name)
	}
	for name := range h {
		if strings.HasPrefix(name, "Proxy-") {
			delete(h, name)
		}
	}
}

func isChunked(te []string) bool { return len(te) > 0 && te[0] == "chunked" }

// flushingBody flushes w before every read of the body it relays, so that
// a streamed body (chunks, server-sent events) reaches the other side as
// it arrives instead of when w's buffer fills. The body must be copied to
// w through a relayWriter.
type flushingBody struct {
	io.ReadCloser
	w *bufio.Writer
	p *Proxy
}

// WriteTo relays the body to dst as the tunnels do (pump: large buffers
// for bulk data, each read written at once). net/http copies a chunked
// body so, into its chunk writer: one chunk per read, instead of one per
// 32 KiB through its own copy buffer. A body delimited by the
// connection's close comes this way too, to a relayWriter; one with a
// Content-Length, which net/http reads through an io.LimitReader, goes
// to relayWriter.ReadFrom instead.
func (f flushingBody) WriteTo(dst io.Writer) (int64, error) { return f.p.pump(dst, f) }

func (f flushingBody) Read(b []byte) (int, error) {
	if f.w.Buffered() > 0 {
		if err := f.w.Flush(); err != nil {
			return 0, err
		}
	}
	return f.ReadCloser.Read(b)
}

// relayWriter is what a forwarded request or response is written to: the
// head and chunk framing go through bw, the buffer over dst. A body with
// a Content-Length arrives through ReadFrom, which flushes bw and then
// relays the body straight to dst as the tunnels do (pump: large buffers
// for bulk data, each read written at once, so streams still stream).
// Relayed 32 KiB at a time through bw, as net/http would, a plain-HTTP
// download ran at about 0.6 of the direct rate. Other bodies are pumped
// by flushingBody.WriteTo: a chunked one into net/http's chunk writer
// over Write, one delimited by the close into Write (bw, emptied by
// every read, passes large writes straight to dst).
//
// It also hides bufio.Writer's own ReadFrom, which reads straight into the
// buffer and so must not meet a flushingBody flushing that same buffer.
type relayWriter struct {
	p   *Proxy
	bw  *bufio.Writer
	dst io.Writer
}

func (w relayWriter) Write(b []byte) (int, error) { return w.bw.Write(b) }

func (w relayWriter) ReadFrom(r io.Reader) (int64, error) {
	if err := w.bw.Flush(); err != nil {
		return 0, err
	}
	return w.p.pump(w.dst, r)
}

type countReader struct {
	r io.Reader
	n *int64
}

func (c countReader) Read(b []byte) (int, error) {
	n, err := c.r.Read(b)
	*c.n += int64(n)
	return n, err
}

type countWriter struct {
	w io.Writer
	n *int64
}

func (c countWriter) Write(b []byte) (int, error) {
	n, err := c.w.Write(b)
	*c.n += int64(n)
	return n, err
}
