package mcp

import (
	"bytes"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/modelcontextprotocol/go-sdk/jsonrpc"
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
		if r.Method == http.MethodPost && !checkBody(w, r) {
			return
		}
		h.ServeHTTP(w, r)
	})
}

// checkBody reads a POST's body (at most maxRequestBody bytes) and
// answers one the SDK could not take with 400 and a JSON-RPC error, as
// stdio answers a bad line (Parse error -32700 for what is not JSON,
// Invalid Request -32600 for JSON that is not a JSON-RPC message), or
// 413 for a body over the bound; the session stays. Otherwise the body
// is put back for the SDK and checkBody reports true.
func checkBody(w http.ResponseWriter, r *http.Request) bool {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBody))
	status, id, code, msg := http.StatusBadRequest, jsonrpc.ID{}, int64(0), ""
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		status, code, msg = http.StatusRequestEntityTooLarge, jsonrpc.CodeInvalidRequest,
			fmt.Sprintf("Invalid Request: a request body is at most %d bytes", maxRequestBody)
	case err != nil:
		code, msg = jsonrpc.CodeParseError, "Parse error: reading the body: "+err.Error()
	case len(bytes.TrimSpace(body)) == 0:
		code, msg = jsonrpc.CodeInvalidRequest, "Invalid Request: an empty body"
	default:
		id, code, msg = checkMessage(bytes.TrimSpace(body))
	}
	if code == 0 {
		r.Body = io.NopCloser(bytes.NewReader(body))
		return true
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(errorResponse(id, code, msg))
	return false
}
