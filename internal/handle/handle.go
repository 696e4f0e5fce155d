// Package handle opens a sandbox of a [sandbox.Backend] for one call: the
// frontends (tent serve, tent mcp) name a sandbox in each request and act
// on it once, so a failed Open is that call's error rather than a branch
// of its own at every call site.
package handle

import (
	"context"
	"net"

	"github.com/tent-sandbox/tent/sandbox"
)

// Open returns b's handle on the sandbox ref names or, when Open fails,
// a handle whose every verb fails with that error (ErrNotFound,
// ErrAmbiguous, ctx's error...).
func Open(ctx context.Context, b sandbox.Backend, ref string) sandbox.Handle {
	h, err := b.Open(ctx, ref)
	if err != nil {
		return failed{ref, err}
	}
	return h
}

// failed is the handle of a sandbox that could not be opened.
type failed struct {
	ref string
	err error
}

func (f failed) ID() string                                      { return f.ref }
func (f failed) Info(context.Context) (sandbox.Info, error)      { return sandbox.Info{}, f.err }
func (f failed) File(context.Context, sandbox.FileRequest) error { return f.err }
func (f failed) Mount(context.Context, sandbox.Mount) error      { return f.err }
func (f failed) Suspend(context.Context) error                   { return f.err }
func (f failed) Resume(context.Context) (sandbox.Info, error)    { return sandbox.Info{}, f.err }
func (f failed) Stop(context.Context) error                      { return f.err }
func (f failed) Terminate(context.Context) error                 { return f.err }
func (f failed) Usage(context.Context) (sandbox.Usage, error)    { return sandbox.Usage{}, f.err }
func (f failed) Dial(context.Context, int) (net.Conn, error)     { return nil, f.err }
func (f failed) Snapshot(context.Context) (*sandbox.Snapshot, error) {
	return nil, f.err
}
func (f failed) Exec(context.Context, sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	return nil, f.err
}
func (f failed) SetNetworkPolicy(context.Context, sandbox.NetworkPolicy) error { return f.err }
func (f failed) SetLimits(context.Context, sandbox.Limits) error               { return f.err }
func (f failed) Start(context.Context, sandbox.ExecRequest, sandbox.StartOptions) (sandbox.Process, error) {
	return nil, f.err
}
func (f failed) Process(context.Context, int) (sandbox.Process, error)    { return nil, f.err }
func (f failed) Processes(context.Context) ([]sandbox.ProcessInfo, error) { return nil, f.err }
