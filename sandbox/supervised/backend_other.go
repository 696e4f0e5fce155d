//go:build !linux

package supervised

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"syscall"

	"github.com/tent-sandbox/tent/sandbox"
)

// Outside Linux the package builds, so that programs importing it compile
// on any system, but [Open] fails with errNotLinux, which wraps
// [sandbox.ErrUnsupported], and no [Backend] can be obtained: its methods
// return that error or zero values.

// errNotLinux is every stub's error.
var errNotLinux = fmt.Errorf("%w: sandboxes need Linux", sandbox.ErrUnsupported)

// Backend is the [sandbox.Backend] of durable, daemonless sandboxes;
// outside Linux none can be opened.
type Backend struct{}

var _ sandbox.Backend = (*Backend)(nil)

// Open fails with an error wrapping [sandbox.ErrUnsupported]: sandboxes
// need Linux.
func Open(string, Options) (*Backend, error) { return nil, errNotLinux }

// Dir returns "".
func (b *Backend) Dir() string { return "" }

// SnapshotsDir returns "".
func (b *Backend) SnapshotsDir() string { return "" }

// Name returns [Name].
func (b *Backend) Name() string { return Name }

// Capabilities returns the zero Capabilities: nothing works.
func (b *Backend) Capabilities() sandbox.Capabilities { return sandbox.Capabilities{} }

// Provision fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Provision(context.Context, sandbox.Spec) (sandbox.Info, error) {
	return sandbox.Info{}, errNotLinux
}

// Fork fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Fork(context.Context, string, sandbox.ForkOverrides) (sandbox.Info, error) {
	return sandbox.Info{}, errNotLinux
}

// Snapshots fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Snapshots(context.Context) ([]*sandbox.Snapshot, error) { return nil, errNotLinux }

// Get fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Get(context.Context, string) (sandbox.Info, error) {
	return sandbox.Info{}, errNotLinux
}

// List fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) List(context.Context) ([]sandbox.Info, error) { return nil, errNotLinux }

// Exec fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Exec(context.Context, string, sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	return nil, errNotLinux
}

// Publish fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Publish(context.Context, string, sandbox.PortMapping) (sandbox.PortMapping, error) {
	return sandbox.PortMapping{}, errNotLinux
}

// Dial fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Dial(context.Context, string, int) (net.Conn, error) { return nil, errNotLinux }

// File fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) File(context.Context, string, sandbox.FileRequest) error { return errNotLinux }

// Mount fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Mount(context.Context, string, sandbox.Mount) error { return errNotLinux }

// SetNetworkPolicy fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) SetNetworkPolicy(context.Context, string, sandbox.NetworkPolicy) error {
	return errNotLinux
}

// Suspend fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Suspend(context.Context, string) error { return errNotLinux }

// Snapshot fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Snapshot(context.Context, string) (*sandbox.Snapshot, error) {
	return nil, errNotLinux
}

// SnapshotWith fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) SnapshotWith(context.Context, string, sandbox.SnapshotOptions) (*sandbox.Snapshot, error) {
	return nil, errNotLinux
}

// Resume fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Resume(context.Context, string) (sandbox.Info, error) {
	return sandbox.Info{}, errNotLinux
}

// Terminate fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Terminate(context.Context, string) error { return errNotLinux }

// Usage fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Usage(context.Context, string) (sandbox.Usage, error) {
	return sandbox.Usage{}, errNotLinux
}

// ExecDetached fails outside Linux.
func (b *Backend) ExecDetached(context.Context, string, sandbox.ExecRequest, DetachOptions) (int, error) {
	return 0, errNotLinux
}

// Processes fails outside Linux.
func (b *Backend) Processes(context.Context, string) ([]ProcessInfo, error) { return nil, errNotLinux }

// SignalProcess fails outside Linux.
func (b *Backend) SignalProcess(context.Context, string, int, syscall.Signal) error {
	return errNotLinux
}

// Attach fails outside Linux.
func (b *Backend) Attach(context.Context, string, int, io.Writer, io.Writer, <-chan os.Signal) (*sandbox.ExecResult, error) {
	return nil, errNotLinux
}
