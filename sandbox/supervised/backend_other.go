//go:build !linux

package supervised

import (
	"context"
	"fmt"
	"io"
	"net"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/secretstore"
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

// Sandbox is a handle on one sandbox of a [Backend]; outside Linux none
// can be obtained: its methods fail.
type Sandbox struct{}

var _ sandbox.Handle = (*Sandbox)(nil)

// Open fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Open(context.Context, string) (sandbox.Handle, error) { return nil, errNotLinux }

// Sandbox fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Sandbox(context.Context, string) (*Sandbox, error) { return nil, errNotLinux }

// Lookup fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Lookup(context.Context, string) (*Sandbox, sandbox.Info, error) {
	return nil, sandbox.Info{}, errNotLinux
}

// ID returns "".
func (s *Sandbox) ID() string { return "" }

// Open fails with an error wrapping [sandbox.ErrUnsupported]: sandboxes
// need Linux.
func Open(string, Options) (*Backend, error) { return nil, errNotLinux }

// Dir returns "".
func (b *Backend) Dir() string { return "" }

// Secrets is the state directory's secret store (unusable here).
func (b *Backend) Secrets() *secretstore.Store { return secretstore.Open(b.Dir()) }

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

// ListAll fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) ListAll(context.Context) ([]sandbox.Info, []*RecordError, error) {
	return nil, nil, errNotLinux
}

// Sweep fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Sweep(context.Context) error { return errNotLinux }

// Snapshots fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) Snapshots(context.Context) ([]*sandbox.Snapshot, error) { return nil, errNotLinux }

// Info fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Info(context.Context) (sandbox.Info, error) {
	return sandbox.Info{}, errNotLinux
}

// List fails with an error wrapping [sandbox.ErrUnsupported].
func (b *Backend) List(context.Context) ([]sandbox.Info, error) { return nil, errNotLinux }

// Exec fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Exec(context.Context, sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	return nil, errNotLinux
}

// Publish fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Publish(context.Context, sandbox.PortMapping) (sandbox.PortMapping, error) {
	return sandbox.PortMapping{}, errNotLinux
}

// Dial fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Dial(context.Context, int) (net.Conn, error) { return nil, errNotLinux }

// File fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) File(context.Context, sandbox.FileRequest) error { return errNotLinux }

// ReadFile fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) ReadFile(context.Context, string, io.Writer, sandbox.ReadOptions) error {
	return errNotLinux
}

// WriteFile fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) WriteFile(context.Context, string, io.Reader, sandbox.WriteOptions) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, errNotLinux
}

// Stat fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Stat(context.Context, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, errNotLinux
}

// ReadDir fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) ReadDir(context.Context, string, int) ([]sandbox.FileInfo, error) {
	return nil, errNotLinux
}

// Mkdir fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Mkdir(context.Context, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, errNotLinux
}

// Rename fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Rename(context.Context, string, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, errNotLinux
}

// Remove fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Remove(context.Context, string, bool) error { return errNotLinux }

// Watch fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Watch(context.Context, string, sandbox.WatchOptions) (<-chan sandbox.WatchEvent, error) {
	return nil, errNotLinux
}

// Mount fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Mount(context.Context, sandbox.Mount) error { return errNotLinux }

// SetLimits fails: not Linux.
func (s *Sandbox) SetLimits(context.Context, sandbox.Limits) error { return errNotLinux }

// SetNetworkPolicy fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) SetNetworkPolicy(context.Context, sandbox.NetworkPolicy) error {
	return errNotLinux
}

// Suspend fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Suspend(context.Context) error { return errNotLinux }

// Stop is not supported off Linux.
func (s *Sandbox) Stop(context.Context) error { return errNotLinux }

// Snapshot fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Snapshot(context.Context) (*sandbox.Snapshot, error) {
	return nil, errNotLinux
}

// SnapshotWith fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) SnapshotWith(context.Context, sandbox.SnapshotOptions) (*sandbox.Snapshot, error) {
	return nil, errNotLinux
}

// Resume fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Resume(context.Context) (sandbox.Info, error) {
	return sandbox.Info{}, errNotLinux
}

// Terminate fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Terminate(context.Context) error { return errNotLinux }

// Usage fails with an error wrapping [sandbox.ErrUnsupported].
func (s *Sandbox) Usage(context.Context) (sandbox.Usage, error) {
	return sandbox.Usage{}, errNotLinux
}

// Processes fails outside Linux.
func (s *Sandbox) Processes(context.Context) ([]ProcessInfo, error) { return nil, errNotLinux }

// Start fails with an error wrapping sandbox.ErrUnsupported.
func (s *Sandbox) Start(context.Context, sandbox.ExecRequest, sandbox.StartOptions) (sandbox.Process, error) {
	return nil, errNotLinux
}

// Process fails with an error wrapping sandbox.ErrUnsupported.
func (s *Sandbox) Process(context.Context, int) (sandbox.Process, error) { return nil, errNotLinux }
