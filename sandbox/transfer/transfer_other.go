//go:build !linux

package transfer

import (
	"context"
	"fmt"
	"io"
	"runtime"

	"github.com/tent-sandbox/tent/sandbox"
)

// errNotLinux is what every copy returns outside Linux.
var errNotLinux = fmt.Errorf("%w: sandboxes need Linux, not %s", sandbox.ErrUnsupported, runtime.GOOS)

// CopyOut fails outside Linux.
func CopyOut(context.Context, sandbox.Handle, string, string, Options) error {
	return errNotLinux
}

// CopyOutTo fails outside Linux.
func CopyOutTo(context.Context, sandbox.Handle, string, io.Writer, Options) error {
	return errNotLinux
}

// CopyIn fails outside Linux.
func CopyIn(context.Context, sandbox.Handle, string, string) error { return errNotLinux }

// CopyInFrom fails outside Linux.
func CopyInFrom(context.Context, sandbox.Handle, io.Reader, string) error {
	return errNotLinux
}
