package serve

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"syscall"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// Reaching a sandbox's ports (the SDKs' getHost): a request whose Host
// is PORT-ID.DOMAIN (what getHost returns, DOMAIN being Options.Domain),
// or one that carries E2b-Sandbox-Id with an E2b-Sandbox-Port other than
// envd's, is forwarded to PORT of sandbox ID's loopback, inside its
// network namespace, through [sandbox.Backend]'s Dial: a server inside
// must listen on loopback or on every address. Nothing else of the host
// becomes reachable from inside; connections only go in.
//
// As E2B's, a sandbox's ports are public by default: whoever can reach
// the server and knows the sandbox's id reaches them, without the API
// key. A sandbox created with network.allowPublicTraffic false (or every
// sandbox, with Options.PrivatePorts) answers only requests carrying its
// traffic access token (the create answer's trafficAccessToken) in the
// e2b-traffic-access-token header, 403 otherwise; so does a sandbox the
// server did not create. The API key, the access tokens and E2B's
// routing headers are removed before a request goes in.

// headerTrafficToken carries a sandbox's traffic access token.
const headerTrafficToken = "E2b-Traffic-Access-Token"

// maxPortHeaderBytes bounds the response header a server inside sends.
const maxPortHeaderBytes = 64 << 10

// portHost parses a getHost host name, "PORT-ID.DOMAIN" with an optional
// ":PORT" of the server's own, into the sandbox's port and id.
func portHost(host string) (port int, id string, ok bool) {
	label, _, found := strings.Cut(host, ".")
	if !found {
		return 0, "", false
	}
	p, id, found := strings.Cut(label, "-")
	if !found || id == "" || len(p) > 5 {
		return 0, "", false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 || p[0] == '0' || p[0] == '+' {
		return 0, "", false
	}
	return port, id, true
}

// portRequest reports which sandbox port r is for, if any: by its Host
// (under domain, when the server has one) or by E2B's headers.
func portRequest(r *http.Request, domain string) (port int, id string, ok bool) {
	if port, id, ok := portHost(r.Host); ok && (domain == "" || hasSuffixFold(r.Host, "."+domain)) {
		return port, id, true
	}
	id, p := r.Header.Get(headerSandboxID), r.Header.Get(headerSandboxPort)
	if id == "" || p == "" || p == envdPort {
		return 0, "", false
	}
	port, err := strconv.Atoi(p)
	if err != nil || port < 1 || port > 65535 {
		return 0, "", false
	}
	return port, id, true
}

// hasSuffixFold is strings.HasSuffix, ignoring case.
func hasSuffixFold(s, suffix string) bool {
	return len(s) >= len(suffix) && strings.EqualFold(s[len(s)-len(suffix):], suffix)
}

// trafficToken is sandbox id's traffic access token.
func (s *Server) trafficToken(id string) string {
	m := hmac.New(sha256.New, s.tokenKey)
	m.Write([]byte("traffic\x00"))
	m.Write([]byte(id))
	return base64.RawURLEncoding.EncodeToString(m.Sum(nil))
}

// privatePorts reports whether sandbox id's ports need its traffic
// token: with Options.PrivatePorts, when it was created with
// network.allowPublicTraffic false, and when the server did not create it
// (it knows nothing of what its owner chose). known is whether the
// server has a record of it.
func (s *Server) privatePorts(id string) (private, known bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	b := s.boxes[id]
	if b == nil {
		return true, false
	}
	if s.opts.PrivatePorts || !b.created {
		return true, true
	}
	return b.ports != nil && b.ports.Private, true
}

// portSettings are what a create's network settings say of traffic into
// the sandbox's ports, kept apart from its egress settings (which a
// create may leave to the template).
type portSettings struct {
	// Private: allowPublicTraffic false.
	Private bool `json:"private,omitempty"`
	// MaskHost is maskRequestHost.
	MaskHost string `json:"mask_host,omitempty"`
}

// validMaskHost reports whether a maskRequestHost can be a Host header:
// "" or at most 255 letters, digits and ".-:[]_", ${PORT} included.
func validMaskHost(h string) bool {
	h = strings.ReplaceAll(h, "${PORT}", "1")
	if len(h) > 255 {
		return false
	}
	for _, c := range h {
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.ContainsRune(".-:[]_", c)) {
			return false
		}
	}
	return true
}

// portSettingsOf extracts n's port settings (nil: the defaults).
func portSettingsOf(n *networkConfig) *portSettings {
	if n == nil {
		return nil
	}
	p := portSettings{Private: n.AllowPublicTraffic != nil && !*n.AllowPublicTraffic}
	if n.MaskRequestHost != nil {
		p.MaskHost = *n.MaskRequestHost
	}
	if p == (portSettings{}) {
		return nil
	}
	return &p
}

// trafficTokenFor is what a create or connect answer carries as
// trafficAccessToken: the token when the sandbox's ports need it.
func (s *Server) trafficTokenFor(id string) *string {
	if private, _ := s.privatePorts(id); !private {
		return nil
	}
	t := s.trafficToken(id)
	return &t
}

// portError is the body of E2B's proxy errors.
type portError struct {
	Message   string `json:"message"`
	SandboxID string `json:"sandboxId"`
	Port      int    `json:"port,omitempty"`
	Code      int    `json:"code"`
}

func (s *Server) writePortError(w http.ResponseWriter, r *http.Request, status int, id string, port int, msg string) {
	s.log.Debug("port request refused", "sandbox", id, "port", port, "status", status, "msg", msg)
	if !s.conns.isAuthenticated(r) {
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, status, portError{Message: msg, SandboxID: id, Port: port, Code: status})
}

// servePort forwards r to port of sandbox id (see the comment above).
func (s *Server) servePort(w http.ResponseWriter, r *http.Request, id string, port int) {
	if strconv.Itoa(port) == envdPort {
		// envd's own host name: the in-sandbox API, as the SDKs reach it
		// without E2B_SANDBOX_URL.
		s.serveSandbox(w, r, id)
		return
	}
	private, known := s.privatePorts(id)
	if !known {
		// Only an exact id: a prefix would let a caller probe for ids.
		info, err := handle.Open(r.Context(), s.b, id).Info(r.Context())
		if err != nil || info.ID != id {
			if err != nil && !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrAmbiguous) {
				s.writeError(w, r, err)
				return
			}
			s.writePortError(w, r, http.StatusBadGateway, id, 0, "The sandbox was not found")
			return
		}
	}
	if private {
		token := r.Header.Get(headerTrafficToken)
		if token == "" || subtle.ConstantTimeCompare([]byte(token), []byte(s.trafficToken(id))) != 1 {
			s.writePortError(w, r, http.StatusForbidden, id, port, "missing or invalid "+strings.ToLower(headerTrafficToken)+" header: this sandbox's ports need its traffic access token")
			return
		}
		s.conns.authenticated(r)
	}
	if err := s.ensureRunning(r.Context(), id); err != nil {
		var he *httpError
		if errors.As(err, &he) && he.status == http.StatusBadGateway {
			s.writePortError(w, r, http.StatusBadGateway, id, 0, "The sandbox was not found")
			return
		}
		s.writeError(w, r, err)
		return
	}
	release, ok := s.acquireStream(id)
	if !ok {
		s.writePortError(w, r, http.StatusTooManyRequests, id, port, "too many requests to this sandbox at once")
		return
	}
	defer release()
	host := r.Host
	if m := s.maskedHost(id); m != "" {
		host = strings.ReplaceAll(m, "${PORT}", strconv.Itoa(port))
	}
	proxy := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			pr.SetURL(&url.URL{Scheme: "http", Host: net.JoinHostPort(id, strconv.Itoa(port))})
			pr.Out.Host = host
			for _, h := range []string{"X-API-Key", headerAccessToken, headerTrafficToken, headerSandboxID, headerSandboxPort} {
				pr.Out.Header.Del(h)
			}
		},
		Transport: s.portTransport,
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			switch {
			case errors.Is(err, context.Canceled):
				// The client went away.
			case errors.Is(err, sandbox.ErrUnsupported):
				// Mode host, the reduced tier: no namespace to go into.
				s.writePortError(w, r, http.StatusNotImplemented, id, port, "reaching port "+strconv.Itoa(port)+" of this sandbox: "+err.Error())
			case errors.Is(err, syscall.ECONNREFUSED):
				s.writePortError(w, r, http.StatusBadGateway, id, port, "The sandbox is running but port is not open")
			default:
				s.writePortError(w, r, http.StatusBadGateway, id, port, "reaching port "+strconv.Itoa(port)+" of the sandbox: "+err.Error())
			}
		},
		ErrorLog: s.portLog,
	}
	// Full duplex: the request body goes on being forwarded after the
	// answer's header has gone back. Without it Go's HTTP/1 server,
	// once the proxy writes that header, reads what is left of the body
	// into the void (a server inside that answers before reading, as an
	// upload reporting progress does, then waits for ever) or closes it
	// under the transport still forwarding it, which then cuts the
	// connection inside and the answer with it. HTTP/2 is full duplex
	// already (the error says so, and is ignored).
	_ = http.NewResponseController(w).EnableFullDuplex()
	proxy.ServeHTTP(w, r)
}

// maskedHost is sandbox id's network.maskRequestHost, if any.
func (s *Server) maskedHost(id string) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	if b := s.boxes[id]; b != nil && b.ports != nil {
		return b.ports.MaskHost
	}
	return ""
}

// newPortTransport is the transport of port requests: each connection
// is dialled inside the sandbox its address names ("ID:PORT"), and none
// is kept idle (a sandbox's connections end with the requests that use
// them, so that nothing holds its network namespace after it ends).
func newPortTransport(b sandbox.Backend) *http.Transport {
	return &http.Transport{
		DialContext: func(ctx context.Context, _, addr string) (net.Conn, error) {
			id, p, err := net.SplitHostPort(addr)
			if err != nil {
				return nil, err
			}
			port, err := strconv.Atoi(p)
			if err != nil {
				return nil, err
			}
			return handle.Open(ctx, b, id).Dial(ctx, port)
		},
		DisableKeepAlives:      true,
		DisableCompression:     true,
		MaxResponseHeaderBytes: maxPortHeaderBytes,
		ForceAttemptHTTP2:      false,
	}
}
