package serve

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// Headers of the in-sandbox API, as the SDKs send them on every request.
const (
	headerSandboxID   = "E2b-Sandbox-Id"
	headerSandboxPort = "E2b-Sandbox-Port"
	headerAccessToken = "X-Access-Token"
)

// envdPort is the port the SDKs name for envd in E2b-Sandbox-Port; the
// server serves no other port of a sandbox.
const envdPort = "49983"

// sandboxPaths are the in-sandbox API's paths and path prefixes; a
// request for one without an E2b-Sandbox-Id header is refused with a
// pointer to the header rather than taken for a control-plane call.
var sandboxPaths = []string{"/files", "/health", "/envs", "/metrics", "/init", "/process.Process/", "/filesystem.Filesystem/"}

// isSandboxPath reports whether p is an in-sandbox API path.
func isSandboxPath(p string) bool {
	for _, q := range sandboxPaths {
		if p == q || strings.HasSuffix(q, "/") && strings.HasPrefix(p, q) || strings.HasPrefix(p, q+"/") {
			return true
		}
	}
	return false
}

// serveSandbox authenticates an in-sandbox request (the sandbox's own
// access token, compared in constant time), checks that the sandbox runs
// (resuming it when it auto-resumes), bounds the sandbox's concurrent
// requests and the body, and hands it to the SandboxAPI.
func (s *Server) serveSandbox(w http.ResponseWriter, r *http.Request, id string) {
	signed := false
	if r.URL.Path == "/files" && r.URL.Query().Has("signature") && (id == "" || r.Header.Get(headerAccessToken) == "") {
		// A signed URL (the SDKs' downloadUrl and uploadUrl) stands in
		// for the access token, on this server's own host name (the
		// sandbox is the one whose token signed it) or on the sandbox's
		// (49983-ID.domain, or an E2b-Sandbox-Id header: only that
		// sandbox's token is tried).
		got, err := s.signedSandbox(r, id)
		if err != nil {
			s.writeError(w, r, err)
			return
		}
		id, signed = got, true
	}
	if id == "" {
		s.writeError(w, r, errorf(http.StatusBadRequest, "in-sandbox request without an %s header: point E2B_SANDBOX_URL at this server and use an E2B SDK, or send the header", headerSandboxID))
		return
	}
	token := r.Header.Get(headerAccessToken)
	if !signed && (token == "" || !s.validToken(id, token)) {
		// One answer for a missing token, a wrong one and another
		// sandbox's: nothing tells a caller which sandboxes exist.
		s.writeError(w, r, errorf(http.StatusUnauthorized, "invalid or missing %s for sandbox %q", headerAccessToken, id))
		return
	}
	s.conns.authenticated(r)
	if p := r.Header.Get(headerSandboxPort); p != "" && p != envdPort {
		// portRequest took every valid port.
		s.writeError(w, r, errorf(http.StatusBadRequest, "%s %q: want a port number, 1-65535", headerSandboxPort, p))
		return
	}
	if err := s.ensureRunning(r.Context(), id); err != nil {
		s.writeError(w, r, err)
		return
	}
	release, ok := s.acquireStream(id)
	if !ok {
		s.writeError(w, r, errorf(http.StatusTooManyRequests, "sandbox %s has %d requests in flight already (the limit)", id, s.opts.MaxStreamsPerSandbox))
		return
	}
	defer release()
	limit := s.opts.MaxSandboxBodyBytes
	if r.URL.Path == "/files" && r.Method == http.MethodPost {
		limit = s.opts.MaxUploadBytes
	}
	r.Body = http.MaxBytesReader(w, r.Body, limit)
	if s.api == nil {
		s.writeError(w, r, notImplemented("the in-sandbox API (this build has none)"))
		return
	}
	s.api.ServeSandbox(w, r, id)
}

// ensureRunning checks that sandbox id (a full id) runs: one that does
// not exist or has ended is 502, as E2B's proxy answers (the SDKs read
// it as "the sandbox is not running"); a paused one is resumed first
// when it auto-resumes, else 502 too.
func (s *Server) ensureRunning(ctx context.Context, id string) error {
	info, err := handle.Open(ctx, s.b, id).Info(ctx)
	if err != nil || info.ID != id {
		if err != nil && !errors.Is(err, sandbox.ErrNotFound) && !errors.Is(err, sandbox.ErrAmbiguous) {
			return err
		}
		return errorf(http.StatusBadGateway, "sandbox %s is not running: no such sandbox", id)
	}
	switch info.State {
	case sandbox.StateRunning:
		return nil
	case sandbox.StateSuspended:
		if s.autoResumes(id) {
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.opts.RequestTimeout)
			defer cancel()
			if _, err := s.resume(rctx, id, s.opts.DefaultTimeout, false); err != nil {
				return err
			}
			return nil
		}
		return errorf(http.StatusBadGateway, "sandbox %s is not running: it is paused (connect to it to resume it)", id)
	}
	s.mu.Lock()
	filesKept := s.boxes[id] != nil && s.boxes[id].pauseSnap != nil
	s.mu.Unlock()
	if filesKept {
		return errorf(http.StatusBadGateway, "sandbox %s is not running: it is paused, its files kept (connect to it to resume it)", id)
	}
	why := ""
	if info.Reason != "" {
		why = ": " + info.Reason
	}
	return errorf(http.StatusBadGateway, "sandbox %s is not running: it has ended%s", id, why)
}

// signedSandbox finds the sandbox a signed /files URL (the SDKs'
// uploadUrl and downloadUrl) is for: the one whose access token signs
// the request's path, operation (GET reads, POST writes) and user, as
// "v1_" and the unpadded base64 of SHA-256("PATH:OP:USER:TOKEN[:EXP]").
// Such a URL names no sandbox (the SDKs sign it for E2B_SANDBOX_URL,
// which is the same for every sandbox), so it is checked against the
// tokens the server holds in memory (every sandbox it created, resumed
// or handed a token for), with one SHA-256 each and no record read; a
// signature of the wrong form, or an expired one, is refused before
// that. When the request names its sandbox (want: its host name or
// E2b-Sandbox-Id), only that sandbox's token is tried.
func (s *Server) signedSandbox(r *http.Request, want string) (string, error) {
	q := r.URL.Query()
	var sig [sha256.Size]byte
	b64, ok := strings.CutPrefix(q.Get("signature"), "v1_")
	if !ok || len(b64) != base64.RawStdEncoding.EncodedLen(len(sig)) {
		return "", errorf(http.StatusUnauthorized, "invalid signature: want v1_ and the unpadded base64 of a SHA-256")
	}
	if n, err := base64.RawStdEncoding.Decode(sig[:], []byte(b64)); err != nil || n != len(sig) {
		return "", errorf(http.StatusUnauthorized, "invalid signature: want v1_ and the unpadded base64 of a SHA-256")
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	exp := q.Get("signature_expiration")
	if exp != "" {
		t, err := strconv.ParseInt(exp, 10, 64)
		if err != nil || time.Now().Unix() > t {
			// envd's words, which the SDKs' callers match.
			return "", errorf(http.StatusUnauthorized, "signature is already expired")
		}
		exp = ":" + exp
	}
	prefix := q.Get("path") + ":" + op + ":" + q.Get("username") + ":"
	// The lookup is done before any authentication: it takes a slot of
	// the control plane's, so that it cannot be used to load the server.
	select {
	case s.requests <- struct{}{}:
		defer func() { <-s.requests }()
	default:
		return "", errorf(http.StatusTooManyRequests, "too many requests at once (at most %d)", s.opts.MaxRequests)
	}
	type cand struct{ id, token string }
	s.mu.Lock()
	cands := make([]cand, 0, len(s.boxes))
	for id, b := range s.boxes {
		cands = append(cands, cand{id, b.token})
	}
	s.mu.Unlock()
	found := ""
	buf := make([]byte, 0, len(prefix)+64+len(exp))
	for _, c := range cands {
		if want != "" && c.id != want {
			continue
		}
		buf = append(append(append(buf[:0], prefix...), c.token...), exp...)
		sum := sha256.Sum256(buf)
		if subtle.ConstantTimeCompare(sum[:], sig[:]) == 1 {
			found = c.id
		}
	}
	if found == "" {
		return "", errorf(http.StatusUnauthorized, "invalid signature for this path, operation and user")
	}
	return found, nil
}

// acquireStream takes one of sandbox id's request slots.
func (s *Server) acquireStream(id string) (release func(), ok bool) {
	b := s.box(id)
	select {
	case b.streams <- struct{}{}:
		return func() { <-b.streams }, true
	default:
		return nil, false
	}
}

// forget tells the in-sandbox API that sandbox id is gone.
func (s *Server) forget(id string) {
	if s.api != nil {
		s.api.Forget(id)
	}
}
