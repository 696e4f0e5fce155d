package envd

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"os"
	"syscall"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
)

// errnoCode maps a system call's errno to the Connect code envd would
// answer, which the SDKs turn into their errors (not_found into
// NotFoundError and FileNotFoundError, ...).
func errnoCode(e syscall.Errno) connect.Code {
	switch e {
	case syscall.ENOENT:
		return connect.CodeNotFound
	case syscall.EEXIST:
		return connect.CodeAlreadyExists
	case syscall.EACCES, syscall.EPERM, syscall.EROFS:
		return connect.CodePermissionDenied
	case syscall.ENOTDIR, syscall.EISDIR, syscall.EINVAL, syscall.ENAMETOOLONG, syscall.ELOOP:
		return connect.CodeInvalidArgument
	case syscall.ENOTEMPTY, syscall.EBUSY, syscall.EXDEV, syscall.ETXTBSY:
		return connect.CodeFailedPrecondition
	case syscall.ENOSPC, syscall.EDQUOT, syscall.EFBIG, syscall.EMFILE, syscall.ENFILE:
		return connect.CodeResourceExhausted
	case syscall.EOPNOTSUPP:
		// For example file metadata on a file system without user
		// extended attributes (tmpfs before Linux 6.6).
		return connect.CodeUnimplemented
	}
	return connect.CodeInternal
}

// errCode is the Connect code of an error of the backend or of the file
// helper.
func errCode(err error) connect.Code {
	var ce *connect.Error
	var pe *os.PathError
	var errno syscall.Errno
	switch {
	case errors.As(err, &ce):
		return ce.Code()
	case errors.Is(err, context.DeadlineExceeded):
		return connect.CodeDeadlineExceeded
	case errors.Is(err, context.Canceled):
		return connect.CodeCanceled
	case errors.As(err, &pe) && errors.As(pe.Err, &errno):
		return errnoCode(errno)
	case errors.Is(err, sandbox.ErrWorkDir), errors.Is(err, sandbox.ErrInvalidSpec):
		return connect.CodeInvalidArgument
	case errors.Is(err, sandbox.ErrNotFound), errors.Is(err, sandbox.ErrTerminated),
		errors.Is(err, sandbox.ErrStopped), errors.Is(err, sandbox.ErrSuspended), errors.Is(err, sandbox.ErrClosed):
		// The sandbox itself is gone or paused: envd would not answer.
		return connect.CodeUnavailable
	case errors.Is(err, sandbox.ErrCommandNotFound), errors.Is(err, sandbox.ErrNotExecutable):
		return connect.CodeInvalidArgument
	case errors.Is(err, sandbox.ErrNoProcess):
		return connect.CodeNotFound
	}
	return connect.CodeInternal
}

// rpcError wraps err as a Connect error with its code (a *connect.Error
// is returned as is).
func rpcError(err error) error {
	var ce *connect.Error
	if errors.As(err, &ce) {
		return err
	}
	return connect.NewError(errCode(err), err)
}

// httpStatus is the /files status of a Connect code, as envd answers
// (the SDKs map 400, 401, 404, 429, 502 and 507).
func httpStatus(c connect.Code) int {
	switch c {
	case connect.CodeNotFound:
		return http.StatusNotFound
	case connect.CodeInvalidArgument:
		return http.StatusBadRequest
	case connect.CodePermissionDenied:
		return http.StatusForbidden
	case connect.CodeAlreadyExists, connect.CodeFailedPrecondition:
		return http.StatusConflict
	case connect.CodeResourceExhausted:
		return http.StatusInsufficientStorage
	case connect.CodeUnavailable:
		return http.StatusBadGateway
	case connect.CodeDeadlineExceeded:
		return http.StatusGatewayTimeout
	case connect.CodeCanceled:
		return 499 // the client went away: nobody reads it
	case connect.CodeUnimplemented:
		return http.StatusNotImplemented
	}
	return http.StatusInternalServerError
}

// writeJSONError writes envd's REST error body, {"code":N,"message":...}.
func writeJSONError(w http.ResponseWriter, status int, msg string) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    int    `json:"code"`
		Message string `json:"message"`
	}{status, msg})
}

// writeConnectError writes a Connect unary error response.
func writeConnectError(w http.ResponseWriter, code connect.Code, msg string) {
	w.Header().Set("Content-Type", "application/json")
	status := httpStatus(code)
	if code == connect.CodeResourceExhausted {
		status = http.StatusTooManyRequests
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}{code.String(), msg})
}
