//go:build !linux

package sandbox

import (
	"context"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/tent-sandbox/tent/netpolicy"
)

// Outside Linux the package builds, so that programs importing it compile
// on any system, but no sandbox can start: every call that would start,
// reach or inspect one fails with errNotLinux, which wraps
// [ErrUnsupported]. No [Sandbox] or [Local] value can be obtained, so
// their methods that return no error only return zero values.

// errNotLinux is every stub's error.
var errNotLinux = fmt.Errorf("%w: sandboxes need Linux", ErrUnsupported)

// running is a started command's state; outside Linux none starts.
type running struct{}

// Start fails with an error wrapping [ErrUnsupported]: sandboxes need Linux.
func (c *Cmd) Start() error { return errNotLinux }

// Wait fails with an error wrapping [ErrUnsupported]: sandboxes need Linux.
func (c *Cmd) Wait() error { return errNotLinux }

// Signal fails with an error wrapping [ErrUnsupported]: sandboxes need
// Linux.
func (c *Cmd) Signal(syscall.Signal) error { return errNotLinux }

// SetNetworkPolicy fails with an error wrapping [ErrUnsupported]:
// sandboxes need Linux.
func (c *Cmd) SetNetworkPolicy(context.Context, NetworkPolicy) error { return errNotLinux }

// Sandbox is a long-lived sandbox; outside Linux none can be provisioned.
type Sandbox struct{}

// Provision fails with an error wrapping [ErrUnsupported]: sandboxes need
// Linux.
func Provision(context.Context, Spec, ProvisionOptions) (*Sandbox, error) { return nil, errNotLinux }

// Fork fails with an error wrapping [ErrUnsupported]: sandboxes need Linux.
func Fork(context.Context, *Snapshot, ProvisionOptions) (*Sandbox, error) { return nil, errNotLinux }

// LoadSnapshot fails with an error wrapping [ErrUnsupported]: snapshots
// need Linux.
func LoadSnapshot(string) (*Snapshot, error) { return nil, errNotLinux }

// ListSnapshots fails with an error wrapping [ErrUnsupported]: snapshots
// need Linux.
func ListSnapshots(string) ([]*Snapshot, error) { return nil, errNotLinux }

// FindSnapshot fails with an error wrapping [ErrUnsupported]: snapshots
// need Linux.
func FindSnapshot(string, string) (*Snapshot, error) { return nil, errNotLinux }

// Info returns the zero Info.
func (s *Sandbox) Info() Info { return Info{} }

// NetworkDenied returns nil.
func (s *Sandbox) NetworkDenied() []netpolicy.Denial { return nil }

// Done returns nil.
func (s *Sandbox) Done() <-chan struct{} { return nil }

// Usage fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Usage() (Usage, error) { return Usage{}, errNotLinux }

// Exec fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Exec(context.Context, ExecRequest) (*ExecResult, error) { return nil, errNotLinux }

// File fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) File(context.Context, FileRequest) error { return errNotLinux }

// ReadFile fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) ReadFile(context.Context, string, io.Writer, ReadOptions) error {
	return errNotLinux
}

// WriteFile fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) WriteFile(context.Context, string, io.Reader, WriteOptions) (FileInfo, error) {
	return FileInfo{}, errNotLinux
}

// ReadDir fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) ReadDir(context.Context, string, int) ([]FileInfo, error) { return nil, errNotLinux }

// Stat fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Stat(context.Context, string) (FileInfo, error) { return FileInfo{}, errNotLinux }

// Mkdir fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Mkdir(context.Context, string) (FileInfo, error) { return FileInfo{}, errNotLinux }

// Rename fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Rename(context.Context, string, string) (FileInfo, error) {
	return FileInfo{}, errNotLinux
}

// Remove fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Remove(context.Context, string, bool) error { return errNotLinux }

// Watch fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Watch(context.Context, string, WatchOptions) (<-chan WatchEvent, error) {
	return nil, errNotLinux
}

// Mount fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Mount(context.Context, Mount) error { return errNotLinux }

// SetNetworkPolicy fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) SetNetworkPolicy(context.Context, NetworkPolicy) error { return errNotLinux }

// Snapshot fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Snapshot(context.Context, string, SnapshotOptions) (*Snapshot, error) {
	return nil, errNotLinux
}

// Suspend fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Suspend(context.Context) error { return errNotLinux }

// Resume fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Resume(context.Context) error { return errNotLinux }

// Terminate fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Terminate(context.Context) error { return errNotLinux }

// Local is the [Backend] that runs sandboxes in this process; outside
// Linux none can be created.
type Local struct{}

var _ Backend = (*Local)(nil)

// NewLocal fails with an error wrapping [ErrUnsupported]: sandboxes need
// Linux.
func NewLocal(LocalOptions) (*Local, error) { return nil, errNotLinux }

// Name returns "local".
func (l *Local) Name() string { return localName }

// Capabilities returns the zero Capabilities: nothing works.
func (l *Local) Capabilities() Capabilities { return Capabilities{} }

// Provision fails with an error wrapping [ErrUnsupported].
func (l *Local) Provision(context.Context, Spec) (Info, error) { return Info{}, errNotLinux }

// List fails with an error wrapping [ErrUnsupported].
func (l *Local) List(context.Context) ([]Info, error) { return nil, errNotLinux }

// Open fails with an error wrapping [ErrUnsupported].
func (l *Local) Open(context.Context, string) (Handle, error) { return nil, errNotLinux }

// Fork fails with an error wrapping [ErrUnsupported].
func (l *Local) Fork(context.Context, string, ForkOverrides) (Info, error) {
	return Info{}, errNotLinux
}

// Health fails with an error wrapping [ErrUnsupported].
func (l *Local) Health(context.Context) error { return errNotLinux }

// Close returns nil: there is nothing to release.
func (l *Local) Close(context.Context) error { return nil }

// Job is a command started by [Sandbox.Start].
type Job struct {
	// Pid is the command's process id inside the sandbox.
	Pid int
}

// Start fails with [ErrUnsupported] outside Linux.
func (s *Sandbox) Start(context.Context, ExecRequest) (*Job, error) { return nil, errNotLinux }

// Signal fails with [ErrUnsupported] outside Linux.
func (p *Job) Signal(syscall.Signal) error { return errNotLinux }

// Resize fails with [ErrUnsupported] outside Linux.
func (p *Job) Resize(WindowSize) error { return errNotLinux }

// CloseStdin fails with [ErrUnsupported] outside Linux.
func (p *Job) CloseStdin() error { return errNotLinux }

// Kill fails with [ErrUnsupported] outside Linux.
func (p *Job) Kill() error { return errNotLinux }

// Wait fails with [ErrUnsupported] outside Linux.
func (p *Job) Wait() (*ExecResult, error) { return nil, errNotLinux }

// Publish needs Linux.
func (s *Sandbox) Publish(context.Context, PortMapping) (PortMapping, error) {
	return PortMapping{}, errNotLinux
}

// DialPort needs Linux.
func (s *Sandbox) DialPort(context.Context, int) (net.Conn, error) { return nil, errNotLinux }

// StartProcess fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) StartProcess(context.Context, ExecRequest, StartOptions) (Process, error) {
	return nil, errNotLinux
}

// Process fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Process(context.Context, int) (Process, error) { return nil, errNotLinux }

// Processes fails with an error wrapping [ErrUnsupported].
func (s *Sandbox) Processes(context.Context) ([]ProcessInfo, error) { return nil, errNotLinux }
