package netpolicy

import (
	"io"
	"math"
	"net"
	"strconv"
	"sync/atomic"
	"time"
)

// Defaults of the limits in [ProxyConfig]: each applies when its field is
// zero. They bound what one sandbox can make its proxy spend (see the
// package documentation, "Limits").
const (
	// DefaultMaxConns is the default of [ProxyConfig.MaxConns]: client
	// connections served at once, HTTP and SOCKS5 together.
	DefaultMaxConns = 256
	// DefaultMaxHeaderBytes is the default of [ProxyConfig.MaxHeaderBytes]:
	// 64 KiB of request line and header fields, as Squid's
	// request_header_max_size and about Envoy's 60 KiB.
	DefaultMaxHeaderBytes = 64 << 10
	// DefaultHeadTimeout is the default of [ProxyConfig.HeadTimeout].
	DefaultHeadTimeout = 30 * time.Second
	// DefaultMaxDenials is the default of [ProxyConfig.MaxDenials]:
	// distinct destinations [Proxy.Denied] lists before it counts the rest
	// together.
	DefaultMaxDenials = 256
	// DefaultAuditBytes is the default of [ProxyConfig.AuditBytes]: 64 MiB
	// of audit log, some 250,000 records.
	DefaultAuditBytes = 64 << 20
)

// MaxSummaryLen is the longest string [Summary] returns, in bytes,
// whatever it is given: it names at most 5 destinations, each cut to 253
// bytes.
const MaxSummaryLen = 2048

// Reasons of the records a limit of the proxy wrote, and of the entries
// of [Proxy.Denied] that stand for refused connections.
const (
	// ReasonTooManyConns: a client connection arrived while the proxy
	// already served [ProxyConfig.MaxConns]; it was closed unread.
	ReasonTooManyConns = "too many connections"
	// ReasonAuditBudget: the audit log reached [ProxyConfig.AuditBytes];
	// later records are dropped and counted.
	ReasonAuditBudget = "audit log budget exhausted"
)

const (
	// idleTimeout bounds the wait for the next request on a kept-alive
	// HTTP connection (HeadTimeout applies from its first byte).
	idleTimeout = 2 * time.Minute
	// lingerTimeout and maxDrain bound the input a connection closing
	// after an error reply discards (lingerClose), and maxDrain the request
	// body read and dropped after a refusal.
	lingerTimeout = time.Second
	maxDrain      = 256 << 10
	// refuseTimeout bounds the write of the 503 to a connection over
	// MaxConns, which the accept loop does itself.
	refuseTimeout = time.Second
)

// limits are a ProxyConfig's limits with defaults applied; "no limit" is
// math.MaxInt64 (or a zero duration).
type limits struct {
	maxConns    int64
	maxHead     int64
	headTimeout time.Duration // 0: none
	maxDenials  int64
	auditBytes  int64
}

func resolveLimits(cfg *ProxyConfig) limits {
	pick := func(v, def int64) int64 {
		switch {
		case v == 0:
			return def
		case v < 0:
			return math.MaxInt64
		}
		return v
	}
	l := limits{
		maxConns:    pick(int64(cfg.MaxConns), DefaultMaxConns),
		maxHead:     pick(int64(cfg.MaxHeaderBytes), DefaultMaxHeaderBytes),
		headTimeout: cfg.HeadTimeout,
		maxDenials:  pick(int64(cfg.MaxDenials), DefaultMaxDenials),
		auditBytes:  pick(cfg.AuditBytes, DefaultAuditBytes),
	}
	switch {
	case l.headTimeout == 0:
		l.headTimeout = DefaultHeadTimeout
	case l.headTimeout < 0:
		l.headTimeout = 0
	}
	return l
}

// deadline returns the time a head started at from must be complete by,
// or the zero time (no deadline).
func (l *limits) deadline(from time.Time) time.Time {
	if l.headTimeout == 0 {
		return time.Time{}
	}
	return from.Add(l.headTimeout)
}

// counters count what the limits cut off.
type counters struct {
	refusedConns atomic.Int64 // connections over MaxConns
	headTooLarge atomic.Int64 // HTTP request heads over MaxHeaderBytes
	headTimeouts atomic.Int64 // heads (HTTP or SOCKS5) not complete within HeadTimeout
	keptWarned   atomic.Bool  // a kept placeholder was logged as a warning
}

// maxHeaderFields caps the header fields of a head wherever MaxHeaderBytes
// is in force, as Apache's LimitRequestFields (100) and Envoy's
// max_headers_count (100) do: parsed, a field costs some 200 bytes of map
// (net/textproto's own estimate), so 64 KiB of fields of 4 bytes each
// would otherwise take 3 MiB.
const maxHeaderFields = 256

// headReader is what a connection's bufio.Reader reads from. While a head
// is being read (from start until its empty line passes, or end), it
// passes at most a budget of bytes and of lines (the first line and
// maxHeaderFields fields), then reports EOF with over set; otherwise it
// passes everything. The bufio.Reader may already hold up to its size of
// the next head, read ahead while the last one was read: that much is
// not counted.
type headReader struct {
	r         io.Reader
	inHead    bool
	bytes     int64 // bytes left
	lines     int64 // lines left
	read      int64 // bytes of this head read
	lineStart bool  // the last byte ended a line
	over      bool  // a budget ran out
	capture   bool  // keep the bytes of the head read (see captured)
	head      []byte
}

// captured returns the bytes read while in the head (with capture set),
// which may run past its end into what was read with it.
func (h *headReader) captured() []byte { return h.head }

// start begins a head of at most limit bytes; math.MaxInt64 lifts both
// budgets.
func (h *headReader) start(limit int64) {
	h.inHead, h.bytes, h.lines, h.read, h.lineStart, h.over = true, limit, 1+maxHeaderFields, 0, false, false
	h.head = h.head[:0]
	if limit == math.MaxInt64 {
		h.lines = math.MaxInt64
	}
}

// end ends the head (when its reader is done with it): what follows is
// passed as it is.
func (h *headReader) end() { h.inHead = false }

func (h *headReader) Read(b []byte) (int, error) {
	if !h.inHead {
		return h.r.Read(b)
	}
	if h.bytes <= 0 || h.lines < 0 {
		h.over = true
		return 0, io.EOF
	}
	if int64(len(b)) > h.bytes {
		b = b[:h.bytes]
	}
	n, err := h.r.Read(b)
	h.bytes -= int64(n)
	h.read += int64(n)
	if h.capture {
		h.head = append(h.head, b[:n]...)
	}
	for i, c := range b[:n] {
		switch c {
		case '\n':
			if h.lineStart { // an empty line: the head is complete
				h.inHead = false
				return n, err
			}
			if h.lines--; h.lines < 0 { // one line too many: cut the head before it
				h.bytes = 0
				return i, err
			}
			h.lineStart = true
		case '\r':
		default:
			h.lineStart = false
		}
	}
	return n, err
}

// storedHost returns a host name as records keep it (audit records, the
// denial table, errors): unchanged when it is at most maxNameLen bytes of
// letters, digits and ".-_:", which every name and IP literal a rule can
// match is; otherwise with every other byte written as \xNN, and cut to
// maxNameLen bytes ending in "..." when longer. The result is printable
// ASCII that JSON does not expand beyond 5/4 of its length.
func storedHost(h string) string {
	if len(h) <= maxNameLen && plainHost(h) {
		return h
	}
	return escapeText(h, maxNameLen, hostByte)
}

// recordHost is storedHost of the normalized form of a host as the client
// sent it, without first copying a name far over the limit.
func recordHost(h string) string {
	if len(h) > maxNameLen+2 { // beyond any name normalizeHost could bring within the limit
		return storedHost(asciiLower(h[:maxNameLen+1]))
	}
	return storedHost(normalizeHost(h))
}

func hostByte(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '.' || c == '-' || c == '_' || c == ':'
}

func plainHost(h string) bool {
	for i := 0; i < len(h); i++ {
		if !hostByte(h[i]) {
			return false
		}
	}
	return true
}

// printable is what Summary leaves as it is: printable ASCII.
func printable(c byte) bool { return 0x20 <= c && c <= 0x7e }

// clampText returns s with bytes outside printable ASCII written as \xNN,
// cut to limit bytes ending in "..." when longer. It leaves the output of
// storedHost, and any short printable string, unchanged.
func clampText(s string, limit int) string {
	if len(s) <= limit {
		i := 0
		for i < len(s) && printable(s[i]) {
			i++
		}
		if i == len(s) {
			return s
		}
	}
	return escapeText(s, limit, printable)
}

// escapeText writes the bytes of s that keep rejects as \xNN and cuts the
// result to at most limit bytes, ending in "..." when cut. limit must be
// at least 3.
func escapeText(s string, limit int, keep func(byte) bool) string {
	const hex = "0123456789abcdef"
	b := make([]byte, 0, min(len(s), limit+4))
	cut := 0 // the longest prefix of whole pieces leaving room for "..."
	for i := 0; i < len(s); i++ {
		if len(b) <= limit-3 {
			cut = len(b)
		}
		if c := s[i]; keep(c) {
			b = append(b, c)
		} else {
			b = append(b, '\\', 'x', hex[c>>4], hex[c&15])
		}
		if len(b) > limit {
			return string(append(b[:cut], "..."...))
		}
	}
	return string(b)
}

// lingerClose closes c after an error reply the client may still be
// sending into (a head too large, or too slow): it half-closes c, so the
// reply and then EOF reach the client, and discards what else arrives for
// at most lingerTimeout and maxDrain bytes before the close. Closed with
// unread input, the socket would answer with a reset, which can reach the
// client before it has read the reply.
func lingerClose(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
		_ = c.SetReadDeadline(time.Now().Add(lingerTimeout))
		_, _ = io.CopyN(io.Discard, c, maxDrain)
	}
	c.Close()
}

// tooManyConnsReply is what an HTTP client connection over MaxConns gets.
func tooManyConnsReply(limit int64) []byte {
	body := "tent: too many connections to the proxy at once (limit " + strconv.FormatInt(limit, 10) + ")\n"
	return []byte("HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain; charset=utf-8\r\n" +
		"Content-Length: " + strconv.Itoa(len(body)) + "\r\nConnection: close\r\n\r\n" + body)
}
