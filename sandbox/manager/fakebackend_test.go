package manager_test

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strings"
	"sync"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// fakeBackend is a sandbox.Backend test double: sandboxes are records,
// ids are sequential (so prefixes can be made ambiguous), provisioning
// can be slowed down or made to fail, and every call is counted.
type fakeBackend struct {
	name  string
	caps  sandbox.Capabilities
	delay time.Duration // each Provision takes this long

	mu          sync.Mutex
	fail        error // Provision fails with it when set
	next        int
	live        map[string]*fakeBox
	provisioned []string
	terminated  map[string]int // id -> Terminate calls that found it
	execBlock   chan struct{}  // when set, Exec waits for it (or ctx)
}

type fakeBox struct {
	s    sandbox.Info
	spec sandbox.Spec
}

func newFake(name string, caps sandbox.Capabilities) *fakeBackend {
	return &fakeBackend{name: name, caps: caps, live: map[string]*fakeBox{}, terminated: map[string]int{}}
}

func (f *fakeBackend) Name() string                       { return f.name }
func (f *fakeBackend) Capabilities() sandbox.Capabilities { return f.caps }

func (f *fakeBackend) Provision(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	if f.delay > 0 {
		t := time.NewTimer(f.delay)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return sandbox.Info{}, ctx.Err()
		case <-t.C:
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.fail != nil {
		return sandbox.Info{}, f.fail
	}
	f.next++
	id := fmt.Sprintf("%s%012d", f.name, f.next)
	s := sandbox.Info{ID: id, Backend: f.name, State: sandbox.StateRunning, Created: time.Now(), Spec: spec, InitPID: 100000 + f.next}
	f.live[id] = &fakeBox{s: s, spec: spec}
	f.provisioned = append(f.provisioned, id)
	return s, nil
}

func (f *fakeBackend) setFail(err error) {
	f.mu.Lock()
	f.fail = err
	f.mu.Unlock()
}

func (f *fakeBackend) box(id string) (*fakeBox, error) {
	if b, ok := f.live[id]; ok {
		return b, nil
	}
	var match *fakeBox
	for k, b := range f.live {
		if strings.HasPrefix(k, id) {
			if match != nil {
				return nil, fmt.Errorf("%w: %q", sandbox.ErrAmbiguous, id)
			}
			match = b
		}
	}
	if match == nil {
		return nil, fmt.Errorf("%w: %q", sandbox.ErrNotFound, id)
	}
	return match, nil
}

func (f *fakeBackend) Mount(ctx context.Context, id string, m sandbox.Mount) error {
	return sandbox.ErrUnsupported
}

func (f *fakeBackend) SetNetworkPolicy(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	return sandbox.ErrUnsupported
}

func (f *fakeBackend) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	f.mu.Lock()
	_, err := f.box(id)
	block := f.execBlock
	f.mu.Unlock()
	if err != nil {
		return nil, err
	}
	if block != nil {
		select {
		case <-block:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return &sandbox.ExecResult{}, nil
}

func (f *fakeBackend) Snapshot(ctx context.Context, id string) (*sandbox.Snapshot, error) {
	return nil, sandbox.ErrUnsupported
}

func (f *fakeBackend) Suspend(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return err
	}
	if !f.caps.Suspend {
		return sandbox.ErrUnsupported
	}
	b.s.State = sandbox.StateSuspended
	return nil
}

func (f *fakeBackend) Stop(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return err
	}
	b.s.State = sandbox.StateStopped
	return nil
}

func (f *fakeBackend) Resume(ctx context.Context, id string) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	b.s.State = sandbox.StateRunning
	return b.s, nil
}

func (f *fakeBackend) Fork(ctx context.Context, snapshotID string, o sandbox.ForkOverrides) (sandbox.Info, error) {
	return sandbox.Info{}, sandbox.ErrUnsupported
}

func (f *fakeBackend) Terminate(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return err
	}
	delete(f.live, b.s.ID)
	f.terminated[b.s.ID]++
	return nil
}

func (f *fakeBackend) List(ctx context.Context) ([]sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	var out []sandbox.Info
	for _, b := range f.live {
		out = append(out, b.s)
	}
	return out, nil
}

func (f *fakeBackend) Get(ctx context.Context, id string) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	return b.s, nil
}

// stop marks a sandbox as ended on its own (its Limits.Timeout).
func (f *fakeBackend) stop(id string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.live[id].s.State = sandbox.StateStopped
}

// counts returns how many sandboxes are live and how many were
// provisioned.
func (f *fakeBackend) counts() (live, provisioned int) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.live), len(f.provisioned)
}

// isLive reports whether id is live.
func (f *fakeBackend) isLive(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.live[id]
	return ok
}

// checkNoLeak reports a sandbox left alive or terminated twice.
func (f *fakeBackend) checkNoLeak() error {
	f.mu.Lock()
	defer f.mu.Unlock()
	var errs []error
	for id := range f.live {
		errs = append(errs, fmt.Errorf("%s: sandbox %s left alive", f.name, id))
	}
	for id, n := range f.terminated {
		if n != 1 {
			errs = append(errs, fmt.Errorf("%s: sandbox %s terminated %d times", f.name, id, n))
		}
	}
	if len(f.terminated) != len(f.provisioned) {
		errs = append(errs, fmt.Errorf("%s: %d provisioned, %d terminated", f.name, len(f.provisioned), len(f.terminated)))
	}
	return errors.Join(errs...)
}

var _ sandbox.Backend = (*fakeBackend)(nil)

func (f *fakeBackend) File(ctx context.Context, id string, req sandbox.FileRequest) error {
	_, err := f.Get(ctx, id)
	return err
}

func (f *fakeBackend) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	_, err := f.Get(ctx, id)
	return sandbox.Usage{}, err
}

func (f *fakeBackend) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	if _, err := f.Get(ctx, id); err != nil {
		return nil, err
	}
	return nil, sandbox.ErrUnsupported
}

// Open returns a handle whose verbs are the id-keyed methods above.
func (f *fakeBackend) Open(ctx context.Context, ref string) (sandbox.Handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := f.box(ref)
	if err != nil {
		return nil, err
	}
	return sandboxtest.HandleByID(f, b.s.ID), nil
}
