package serve

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strings"

	"github.com/tent-sandbox/tent/sandbox"
)

// httpError is a refusal with the HTTP status that says what kind.
type httpError struct {
	status int
	msg    string
}

func (e *httpError) Error() string { return e.msg }

// errorf returns an *httpError with the formatted message.
func errorf(status int, format string, args ...any) error {
	return &httpError{status: status, msg: fmt.Sprintf(format, args...)}
}

// notImplemented is the refusal of an E2B feature tent does not serve.
func notImplemented(what string) error {
	return errorf(http.StatusNotImplemented, "not implemented by tent serve: %s", what)
}

// statusOf maps an error to its HTTP status: the library's sentinel
// errors to the E2B API's statuses, anything unknown to 500.
func statusOf(err error) int {
	var he *httpError
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &he):
		return he.status
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge
	case errors.Is(err, sandbox.ErrNotFound):
		return http.StatusNotFound
	case errors.Is(err, sandbox.ErrAmbiguous):
		// A prefix that names several sandboxes: the client must be
		// precise. E2B ids are always given whole by the SDK.
		return http.StatusBadRequest
	case errors.Is(err, sandbox.ErrInvalidSpec), errors.Is(err, sandbox.ErrInvalidOptions):
		return http.StatusBadRequest
	case errors.Is(err, sandbox.ErrUnsupported):
		// The request asks for what this host cannot enforce: retrying
		// cannot help, so it is the client's to change (the message says
		// what is missing).
		return http.StatusBadRequest
	case errors.Is(err, sandbox.ErrTerminated), errors.Is(err, sandbox.ErrStopped):
		// Ended, and nothing to resume it from: kill it.
		return http.StatusConflict
	case errors.Is(err, sandbox.ErrClosed):
		return http.StatusServiceUnavailable
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusGatewayTimeout
	}
	return http.StatusInternalServerError
}

// writeError answers with E2B's error body; 5xx errors are logged.
func (s *Server) writeError(w http.ResponseWriter, r *http.Request, err error) {
	status := statusOf(err)
	msg := strings.ReplaceAll(err.Error(), sandbox.BestEffortHint, "add best_effort: true to the template to accept the degradation")
	var he *httpError
	if status >= 500 && !errors.As(err, &he) {
		s.log.Error("request failed", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	} else {
		s.log.Debug("request refused", "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
	}
	if status == http.StatusUnauthorized || !s.conns.isAuthenticated(r) {
		// A client without credentials may not keep a connection idle.
		w.Header().Set("Connection", "close")
	}
	writeJSON(w, status, apiError{Code: status, Message: msg})
}

// writeJSON answers with v as JSON.
func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		status = http.StatusInternalServerError
		b, _ = json.Marshal(apiError{Code: status, Message: "encoding the response: " + err.Error()})
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_, _ = w.Write(append(b, '\n'))
}
