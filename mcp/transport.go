package mcp

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// MaxMessage bounds one JSON-RPC message (or batch) a client sends: a
// line over stdio, a request body over HTTP. A longer line is read
// through and discarded, never held whole, and answered with an Invalid
// Request error; the session goes on.
const MaxMessage = maxRequestBody

// StdioTransport serves one session over newline-delimited JSON-RPC, as
// the SDK's [sdk.StdioTransport] does, except that a line the SDK could
// not take does not end the session: a line that is not JSON is
// answered with a Parse error (-32700, id null), valid JSON that is not
// a JSON-RPC message (or batch of them) with an Invalid Request error
// (-32600, with the message's id when it has a valid one, else null), a
// line longer than [MaxMessage] with an Invalid Request error after it
// was read through without being kept; then the next line is read.
// Empty lines are skipped.
type StdioTransport struct {
	// Reader and Writer default to os.Stdin and os.Stdout.
	Reader io.Reader
	Writer io.Writer
	// MaxLine bounds a line; 0 is [MaxMessage].
	MaxLine int
	// Logger, when not nil, is told of every line refused.
	Logger *slog.Logger
}

// Connect implements [sdk.Transport].
func (t *StdioTransport) Connect(ctx context.Context) (sdk.Connection, error) {
	r, w := t.Reader, t.Writer
	if r == nil {
		r = os.Stdin
	}
	if w == nil {
		w = os.Stdout
	}
	max := t.MaxLine
	if max <= 0 {
		max = MaxMessage
	}
	log := t.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	out := &lineWriter{w: w}
	pr, pw := io.Pipe()
	// The SDK's connection reads only lines this transport checked: one
	// JSON value each, so its decoder never fails on them (it bounds
	// nothing then: the line was bounded here).
	inner, err := (&sdk.IOTransport{Reader: pr, Writer: out, MaxLineLength: -1}).Connect(ctx)
	if err != nil {
		return nil, err
	}
	c := &lineConn{inner: inner, out: out, in: r, log: log}
	go c.filter(bufio.NewReaderSize(r, 64<<10), pw, max)
	return c, nil
}

// lineWriter serialises whole lines from the SDK and from the filter;
// closing it leaves the underlying writer (stdout) open.
type lineWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (w *lineWriter) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.w.Write(p)
}

func (w *lineWriter) Close() error { return nil }

// lineConn is the SDK's connection over the checked lines, answering
// what the SDK still refuses after decoding a line rather than ending
// the session on it. (The SDK's connection is not told the session's
// protocol version, an unexported hook: batches are taken whatever the
// version, as before 2025-06-18.)
type lineConn struct {
	inner sdk.Connection
	out   *lineWriter
	in    io.Reader
	log   *slog.Logger
	// ended is set once the input ended (before the SDK's reader is told).
	ended atomic.Bool
}

// filter reads lines from r, writes those that are JSON-RPC messages to
// pw and answers the others, until r ends or the connection closes.
func (c *lineConn) filter(r *bufio.Reader, pw *io.PipeWriter, max int) {
	for {
		line, tooLong, err := readLine(r, max)
		switch {
		case tooLong:
			c.refuse(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest,
				fmt.Sprintf("Invalid Request: a message is at most %d bytes (one line); this line was longer and was discarded", max))
		case len(bytes.TrimSpace(line)) > 0:
			line = bytes.TrimSpace(line)
			if id, code, msg := checkMessage(line); code != 0 {
				c.refuse(id, code, msg)
				break
			}
			if _, werr := pw.Write(append(line, '\n')); werr != nil {
				return // the connection was closed
			}
		}
		if err != nil {
			c.ended.Store(true)
			if errors.Is(err, io.EOF) {
				err = nil
			}
			pw.CloseWithError(err)
			return
		}
	}
}

// readLine reads one line of r (without its newline). A line longer
// than max is read through and dropped: tooLong, and no bytes.
func readLine(r *bufio.Reader, max int) (line []byte, tooLong bool, err error) {
	for {
		chunk, err := r.ReadSlice('\n')
		if !tooLong {
			if len(line)+len(chunk) > max+1 { // +1: the newline
				tooLong, line = true, nil
			} else {
				line = append(line, chunk...)
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		return bytes.TrimSuffix(line, []byte("\n")), tooLong, err
	}
}

// refuse answers a message that was not passed on.
func (c *lineConn) refuse(id jsonrpc.ID, code int64, msg string) {
	c.log.Warn("mcp: refused a malformed message", "code", code, "reason", msg)
	_, _ = c.out.Write(append(errorResponse(id, code, msg), '\n'))
}

// errorResponse is a JSON-RPC error response; unlike the SDK's encoding
// it has "id": null when id is not valid, as JSON-RPC 2.0 asks of the
// answer to a message whose id could not be read.
func errorResponse(id jsonrpc.ID, code int64, msg string) []byte {
	type wireError struct {
		Code    int64  `json:"code"`
		Message string `json:"message"`
	}
	data, err := json.Marshal(struct {
		Version string    `json:"jsonrpc"`
		ID      any       `json:"id"`
		Error   wireError `json:"error"`
	}{"2.0", id.Raw(), wireError{code, msg}})
	if err != nil { // cannot happen: the fields are a string, a number and nil
		panic(err)
	}
	return data
}

// Read returns the next message. An error the SDK's connection returns
// for a message it decoded (a batch reusing the id of a request still
// in flight) is answered and the next
// message read: only the end of the input or of the connection ends it.
func (c *lineConn) Read(ctx context.Context) (jsonrpc.Message, error) {
	for {
		msg, err := c.inner.Read(ctx)
		if err == nil || ctx.Err() != nil || c.ended.Load() || errors.Is(err, io.EOF) || errors.Is(err, sdk.ErrConnectionClosed) {
			return msg, err
		}
		c.refuse(jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Invalid Request: "+err.Error())
	}
}

// Write implements [sdk.Connection].
func (c *lineConn) Write(ctx context.Context, msg jsonrpc.Message) error {
	return c.inner.Write(ctx, msg)
}

// Close closes the SDK's connection and the input, as the SDK's stdio
// transport does (which may unblock the filter's read).
func (c *lineConn) Close() error {
	err := c.inner.Close()
	if cl, ok := c.in.(io.Closer); ok {
		_ = cl.Close()
	}
	return err
}

// SessionID implements [sdk.Connection].
func (c *lineConn) SessionID() string { return "" }

// checkMessage tells whether data (one line, or one HTTP body, trimmed)
// is something the SDK decodes: one JSON-RPC message or a non-empty
// batch of them with distinct request ids. Otherwise it returns the
// JSON-RPC error to answer: its code (0 when data is fine), message,
// and the id to answer with (the message's own when it has a valid one,
// as JSON-RPC asks, else null).
func checkMessage(data []byte) (id jsonrpc.ID, code int64, msg string) {
	if !json.Valid(data) {
		err := json.Unmarshal(data, new(json.RawMessage))
		return jsonrpc.ID{}, jsonrpc.CodeParseError, fmt.Sprintf("Parse error: not JSON (%v)", err)
	}
	if data[0] == '[' {
		var elems []json.RawMessage
		if err := json.Unmarshal(data, &elems); err != nil || len(elems) == 0 {
			return jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, "Invalid Request: an empty batch"
		}
		seen := map[jsonrpc.ID]bool{}
		for i, e := range elems {
			m, err := jsonrpc.DecodeMessage(e)
			if err != nil {
				return jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: batch element %d is not a JSON-RPC 2.0 message: %v", i+1, err)
			}
			if r, ok := m.(*jsonrpc.Request); ok && r.IsCall() {
				if seen[r.ID] {
					return jsonrpc.ID{}, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: batch element %d reuses the id %v", i+1, r.ID.Raw())
				}
				seen[r.ID] = true
			}
		}
		return jsonrpc.ID{}, 0, ""
	}
	if _, err := jsonrpc.DecodeMessage(data); err != nil {
		var m struct{ ID any }
		if json.Unmarshal(data, &m) == nil {
			id, _ = jsonrpc.MakeID(m.ID)
		}
		return id, jsonrpc.CodeInvalidRequest, fmt.Sprintf("Invalid Request: not a JSON-RPC 2.0 message: %v", err)
	}
	return jsonrpc.ID{}, 0, ""
}
