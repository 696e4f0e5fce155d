package mcp

import (
	"crypto/subtle"
	"net/http"
	"strings"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// HTTP bounds: a request body (one JSON-RPC message or batch), and how
// long a session may sit idle before the server forgets it.
const (
	maxRequestBody = 16 << 20
	sessionIdle    = 30 * time.Minute
)

// Handler returns the Streamable HTTP handler of the server, every
// request of which must carry "Authorization: Bearer TOKEN" (401
// otherwise, compared in constant time). An empty token is refused
// (panics): serve without authentication only over stdio.
//
// The SDK's own protections stay on: requests whose Host is not the
// listener's loopback name when it listens on loopback (DNS rebinding)
// and cross-origin browser requests are refused; bodies are bounded.
func (s *Server) Handler(token string) http.Handler {
	if token == "" {
		panic("mcp: Handler needs a bearer token")
	}
	h := sdk.NewStreamableHTTPHandler(func(*http.Request) *sdk.Server { return s.srv },
		&sdk.StreamableHTTPOptions{Logger: s.log, SessionTimeout: sessionIdle, MaxRequestBodyBytes: maxRequestBody})
	want := []byte("Bearer " + token)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got := r.Header.Get("Authorization")
		if scheme, rest, ok := strings.Cut(got, " "); ok && strings.EqualFold(scheme, "bearer") {
			got = "Bearer " + strings.TrimSpace(rest)
		}
		if subtle.ConstantTimeCompare([]byte(got), want) != 1 {
			w.Header().Set("WWW-Authenticate", `Bearer realm="tent mcp"`)
			http.Error(w, "missing or wrong bearer token: send Authorization: Bearer <the token tent mcp printed or read from its token file>", http.StatusUnauthorized)
			return
		}
		h.ServeHTTP(w, r)
	})
}
