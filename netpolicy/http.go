package netpolicy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// httpConn is one client connection to the HTTP proxy.
type httpConn struct {
	p  *Proxy
	c  net.Conn
	hr *headReader // caps a request head; passes bodies and tunnels
	br *bufio.Reader
	bw *bufio.Writer

	up    *upstream   // kept-alive upstream of plain forwarding, or nil
	upKey string      // its host:port as requested
	upHR  *headReader // caps a response head; passes bodies
	upBR  *bufio.Reader
	upBW  *bufio.Writer
	upIn  int64 // bytes read from up
	upOut int64 // bytes written to up

	icpt  *interception // a TLS connection the proxy terminated, or nil
	scrub []scrubPair   // secret values to keep out of the next response
}

// serveHTTPConn serves one client connection: requests, each head within
// MaxHeaderBytes and HeadTimeout (counted from the accept for the first,
// from the first byte for the next ones), until the client closes, a
// CONNECT makes it a tunnel or an error ends it.
func (p *Proxy) serveHTTPConn(c net.Conn) {
	s := &httpConn{p: p, c: c, hr: &headReader{r: c}}
	s.br = bufio.NewReader(s.hr)
	s.bw = bufio.NewWriter(c)
	s.serve(time.Now())
}

// serve reads and answers requests on s until the connection ends.
func (s *httpConn) serve(accepted time.Time) {
	p, c := s.p, s.c
	defer s.dropUpstream()
	for first := true; ; first = false {
		s.hr.start(p.lim.maxHead)
		if first && p.lim.headTimeout > 0 {
			c.SetReadDeadline(p.lim.deadline(accepted))
		} else {
			c.SetReadDeadline(time.Now().Add(idleTimeout))
			if _, err := s.br.Peek(1); err != nil {
				return // idle for too long, or closed
			}
			c.SetReadDeadline(p.lim.deadline(time.Now()))
		}
		req, err := http.ReadRequest(s.br)
		if err != nil {
			switch {
			case s.hr.over:
				p.count.headTooLarge.Add(1)
				msg := fmt.Sprintf("tent: request head larger than %d bytes or %d header fields\n", p.lim.maxHead, maxHeaderFields)
				s.replyAndClose(http.StatusRequestHeaderFieldsTooLarge, msg)
			case isTimeout(err):
				p.count.headTimeouts.Add(1)
				if s.hr.read > 0 { // it sent something
					msg := fmt.Sprintf("tent: request head not complete within %v\n", p.lim.headTimeout)
					s.replyAndClose(http.StatusRequestTimeout, msg)
				}
			case !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed):
				s.replyAndClose(http.StatusBadRequest, "tent: malformed HTTP request\n")
			}
			return
		}
		c.SetReadDeadline(time.Time{})
		s.hr.end()
		if s.icpt != nil {
			if !s.forwardIntercepted(req) {
				return
			}
			continue
		}
		if req.Method == http.MethodConnect {
			if !s.connect(req) {
				return
			}
			continue
		}
		if !s.forward(req) {
			return
		}
	}
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}

// connect serves a CONNECT request. It reports whether the connection
// stays an HTTP proxy connection (after a refusal); after a tunnel, it is
// done.
func (s *httpConn) connect(req *http.Request) bool {
	host, port, err := splitHostPort(req.Host, 443)
	if err != nil {
		return s.reply(http.StatusBadRequest, nil, "tent: bad CONNECT target: "+err.Error()+"\n", req.Close)
	}
	u, err := s.p.open(s.p.ctx, "connect", host, port)
	if err != nil {
		return s.refused(err, req)
	}
	s.dropUpstream()
	icpt := s.p.intercepts(s.p.Policy(), host, port)
	if icpt {
		if err := s.p.upstreamTLS(u, host); err != nil {
			return s.refused(err, req)
		}
	}
	s.bw.WriteString("HTTP/1.1 200 Connection established\r\n\r\n")
	if err := s.bw.Flush(); err != nil {
		s.p.finish(u, 0, 0)
		return false
	}
	pending, _ := s.br.Peek(s.br.Buffered())
	if icpt {
		s.p.intercept(s.c, pending, u, host, port)
		return false
	}
	s.p.tunnel(s.c, u, pending)
	return false
}

// forward relays one absolute-form request and its response. It reports
// whether the client connection may carry another request.
func (s *httpConn) forward(req *http.Request) bool {
	if req.URL.Scheme != "http" || req.URL.Host == "" {
		msg := "tent: this is a proxy: send absolute-form http:// URLs, or CONNECT for https\n"
		return s.reply(http.StatusBadRequest, nil, msg, true)
	}
	host, port, err := splitHostPort(req.URL.Host, 80)
	if err != nil {
		return s.reply(http.StatusBadRequest, nil, "tent: bad URL host: "+err.Error()+"\n", true)
	}
	key := normalizeHost(host) + ":" + strconv.Itoa(port)
	reused := s.up != nil && s.upKey == key
	if reused {
		err = s.p.recheck(s.up, "http", host, port)
	} else {
		err = s.dial(host, port, key)
	}
	if err != nil {
		s.dropUpstream()
		return s.refused(err, req)
	}
	pol := s.p.Policy()
	// No secret goes to a host in clear text, but its host may still
	// send one back (one it keeps from an HTTPS request): its answers
	// are scrubbed as on an intercepted connection.
	secrets := s.p.resolve(pol)
	s.scrub = s.p.scrubFor(secrets, normalizeHost(host), port)
	if pol.hasHTTPRules(host, port) {
		d, ok, keep := s.checkRequest(req, pol, host, port)
		if !ok {
			return keep
		}
		s.recordRequest(req, "http", host, port, d, nil, recordPath(req))
	}
	if sub := substitute(secrets, req, normalizeHost(host), port, false); len(sub.kept) > 0 {
		s.p.keptPlaceholders("http", host, port, req, sub.kept, recordPath(req))
	}
	if len(s.scrub) > 0 {
		wholeAnswers(req)
	}
	return s.exchange(req, host, port, key, reused)
}

// exchange relays req to the upstream connection s holds for host:port
// (key) and the response back. It reports whether the client connection
// may carry another request.
func (s *httpConn) exchange(req *http.Request, host string, port int, key string, reused bool) bool {
	clientClose := req.Close
	removeHopHeaders(req.Header)
	if _, ok := req.Header["User-Agent"]; !ok {
		req.Header["User-Agent"] = []string{""} // keep Go from adding its own
	}
	if strings.EqualFold(req.Header.Get("Expect"), "100-continue") {
		req.Header.Del("Expect")
		s.bw.WriteString("HTTP/1.1 100 Continue\r\n\r\n")
		if s.bw.Flush() != nil {
			return false
		}
	}
	req.Close = false
	bodyless := req.Body == nil || req.Body == http.NoBody
	if !bodyless {
		req.Body = flushingBody{req.Body, s.upBW, s.p}
	}
	resp, err := s.roundTrip(req)
	if err != nil && reused && bodyless {
		// The origin may have closed the idle connection: try once afresh.
		s.dropUpstream()
		if err := s.dial(host, port, key); err != nil {
			return s.refused(err, req)
		}
		resp, err = s.roundTrip(req)
	}
	if err == nil && len(s.scrub) > 0 {
		if err = scrubResponse(resp, s.scrub); err != nil {
			resp.Body.Close()
		}
	}
	if err != nil {
		s.dropUpstream()
		return s.reply(http.StatusBadGateway, nil, fmt.Sprintf("tent: %s: %v\n", key, scrubError(err, s.scrub)), true)
	}
	upstreamClose := resp.Close
	removeHopHeaders(resp.Header)
	// Without a length or chunking the body ends when the connection does,
	// so the client connection must close after it (Response.Write agrees).
	delimitedByClose := resp.ContentLength < 0 && !isChunked(resp.TransferEncoding) &&
		req.Method != http.MethodHead && resp.StatusCode != http.StatusNoContent &&
		resp.StatusCode != http.StatusNotModified
	resp.Close = clientClose || delimitedByClose
	if resp.Body != nil && resp.Body != http.NoBody {
		resp.Body = flushingBody{resp.Body, s.bw, s.p}
	}
	werr := resp.Write(relayWriter{s.p, s.bw, s.c})
	if werr == nil {
		werr = s.bw.Flush()
	}
	resp.Body.Close()
	if werr != nil || upstreamClose || delimitedByClose {
		s.dropUpstream()
	}
	return werr == nil && !resp.Close
}

// dial opens a new upstream connection for plain forwarding.
func (s *httpConn) dial(host string, port int, key string) error {
	s.dropUpstream()
	proto := "http"
	if s.icpt != nil {
		proto = s.icpt.proto
	}
	u, err := s.p.open(s.p.ctx, proto, host, port)
	if err != nil {
		return err
	}
	if s.icpt != nil && !s.icpt.plain {
		if err := s.p.upstreamTLS(u, host); err != nil {
			return err
		}
	}
	s.setUpstream(u, key)
	return nil
}

// setUpstream makes u the upstream connection of s.
func (s *httpConn) setUpstream(u *upstream, key string) {
	s.up, s.upKey = u, key
	s.upHR = &headReader{r: countReader{u.stream(), &s.upIn}}
	s.upBR = bufio.NewReader(s.upHR)
	s.upBW = bufio.NewWriter(countWriter{u.stream(), &s.upOut})
}

// roundTrip sends req upstream and reads the final response, relaying
// informational (1xx) responses to the client on the way.
func (s *httpConn) roundTrip(req *http.Request) (*http.Response, error) {
	if err := req.Write(relayWriter{s.p, s.upBW, countWriter{s.up.stream(), &s.upOut}}); err != nil {
		return nil, fmt.Errorf("failed to send the request: %w", err)
	}
	if err := s.upBW.Flush(); err != nil {
		return nil, fmt.Errorf("failed to send the request: %w", err)
	}
	for {
		s.upHR.start(s.p.lim.maxHead)
		resp, err := http.ReadResponse(s.upBR, req)
		s.upHR.end()
		if err != nil && s.upHR.over {
			return nil, fmt.Errorf("response head larger than %d bytes or %d header fields", s.p.lim.maxHead, maxHeaderFields)
		}
		if err != nil {
			return nil, readError(err)
		}
		switch {
		case resp.StatusCode < 100:
			// net/http reads "099" (three digits), with a body, which
			// relayed as an interim response would go out unscrubbed.
			resp.Body.Close()
			return nil, errMalformedResponse
		case resp.StatusCode == http.StatusSwitchingProtocols:
			return nil, errors.New("protocol upgrades are not supported over plain forwarding: use CONNECT")
		case resp.StatusCode >= 200:
			return resp, nil
		}
		resp.Body = http.NoBody // an interim response has none (net/http reads none)
		removeHopHeaders(resp.Header)
		scrubHead(resp, s.scrub)
		if err := resp.Write(s.bw); err != nil {
			return nil, err
		}
		if err := s.bw.Flush(); err != nil {
			return nil, err
		}
	}
}

// dropUpstream closes the kept-alive upstream, if any.
func (s *httpConn) dropUpstream() {
	if s.up != nil {
		s.p.finish(s.up, s.upOut, s.upIn)
		s.up, s.upKey, s.upHR, s.upBR, s.upBW, s.upIn, s.upOut = nil, "", nil, nil, nil, 0, 0
	}
}

// splitHostPort splits "host:port", "[v6]:port" or a bare host (then def
// is the port).
func splitHostPort(hostport string, def int) (string, int, error) {
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		if strings.Contains(hostport, "]") || strings.Count(hostport, ":") == 0 {
			return strings.Trim(hostport, "[]"), def, nil
		}
		return "", 0, err
	}
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 {
		return "", 0, fmt.Errorf("bad port %q", port)
	}
	return host, n, nil
}
