package serve

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// fakeBackend is an in-memory sandbox.Backend: enough lifecycle to test
// the server's routing, auth, limits and error mapping without
// sandboxes. errs, when set for a method name, makes that method fail.
type fakeBackend struct {
	caps sandbox.Capabilities

	mu    sync.Mutex
	n     int
	boxes map[string]*sandbox.Info
	snaps map[string]sandbox.Spec
	// snapRoot, when set, is where Snapshot makes a directory for each
	// snapshot (Snapshot.Dir).
	snapRoot string
	errs     map[string]error
	calls    []string
	policy   map[string]sandbox.NetworkPolicy
	// dial, when set, answers Dial for a sandbox that exists.
	dial func(id string, port int) (net.Conn, error)
}

func newFake() *fakeBackend {
	return &fakeBackend{
		caps:   sandbox.Capabilities{Snapshot: true, Suspend: true, Resume: true, NetworkPolicy: true, CgroupVersion: "v2"},
		boxes:  map[string]*sandbox.Info{},
		snaps:  map[string]sandbox.Spec{},
		errs:   map[string]error{},
		policy: map[string]sandbox.NetworkPolicy{},
	}
}

func (f *fakeBackend) fail(method string, err error) {
	f.mu.Lock()
	f.errs[method] = err
	f.mu.Unlock()
}

// call records a call and returns the error set for it.
func (f *fakeBackend) call(method string) error {
	f.calls = append(f.calls, method)
	return f.errs[method]
}

func (f *fakeBackend) Name() string                       { return "fake" }
func (f *fakeBackend) Capabilities() sandbox.Capabilities { return f.caps }

func (f *fakeBackend) Provision(ctx context.Context, spec sandbox.Spec) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Provision"); err != nil {
		return sandbox.Info{}, err
	}
	return f.addLocked(spec), nil
}

func (f *fakeBackend) addLocked(spec sandbox.Spec) sandbox.Info {
	f.n++
	id := fmt.Sprintf("%016x", 0xf00d0000+f.n)
	i := &sandbox.Info{ID: id, Backend: "fake", State: sandbox.StateRunning, Created: time.Now(), Spec: spec}
	f.boxes[id] = i
	return *i
}

func (f *fakeBackend) lookupLocked(ref string) (*sandbox.Info, error) {
	if i := f.boxes[ref]; i != nil {
		return i, nil
	}
	return nil, fmt.Errorf("no sandbox %q: %w", ref, sandbox.ErrNotFound)
}

func (f *fakeBackend) Get(ctx context.Context, ref string) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Get"); err != nil {
		return sandbox.Info{}, err
	}
	i, err := f.lookupLocked(ref)
	if err != nil {
		return sandbox.Info{}, err
	}
	return *i, nil
}

// Open returns a handle whose verbs are the id-keyed methods of f.
func (f *fakeBackend) Open(ctx context.Context, ref string) (sandbox.Handle, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	i, err := f.lookupLocked(ref)
	if err != nil {
		return nil, err
	}
	return sandboxtest.HandleByID(f, i.ID), nil
}

func (f *fakeBackend) List(ctx context.Context) ([]sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("List"); err != nil {
		return nil, err
	}
	var out []sandbox.Info
	for _, id := range slices.Sorted(maps.Keys(f.boxes)) {
		out = append(out, *f.boxes[id])
	}
	return out, nil
}

func (f *fakeBackend) Exec(ctx context.Context, id string, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	return nil, sandbox.ErrUnsupported
}

func (f *fakeBackend) File(ctx context.Context, id string, req sandbox.FileRequest) error {
	return sandbox.ErrUnsupported
}

func (f *fakeBackend) Mount(ctx context.Context, id string, m sandbox.Mount) error {
	return sandbox.ErrUnsupported
}

func (f *fakeBackend) SetNetworkPolicy(ctx context.Context, id string, p sandbox.NetworkPolicy) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("SetNetworkPolicy"); err != nil {
		return err
	}
	i, err := f.lookupLocked(id)
	if err != nil {
		return err
	}
	if i.Spec.Network.Mode.Normalize() != netpolicy.Limited {
		return fmt.Errorf("network mode %s: %w", i.Spec.Network.Mode, sandbox.ErrUnsupported)
	}
	i.Spec.Network = p
	return nil
}

func (f *fakeBackend) Snapshot(ctx context.Context, id string) (*sandbox.Snapshot, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Snapshot"); err != nil {
		return nil, err
	}
	i, err := f.lookupLocked(id)
	if err != nil {
		return nil, err
	}
	sid := fmt.Sprintf("snap%d", len(f.snaps)+1)
	f.snaps[sid] = i.Spec
	snap := &sandbox.Snapshot{ID: sid, SandboxID: id, Spec: i.Spec}
	if f.snapRoot != "" {
		// A directory to say where it lives, as the real backends do.
		snap.Dir = filepath.Join(f.snapRoot, sid)
		if err := os.Mkdir(snap.Dir, 0o700); err != nil {
			return nil, err
		}
	}
	return snap, nil
}

func (f *fakeBackend) Suspend(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Suspend"); err != nil {
		return err
	}
	i, err := f.lookupLocked(id)
	if err != nil {
		return err
	}
	i.State = sandbox.StateSuspended
	return nil
}

func (f *fakeBackend) Stop(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Stop"); err != nil {
		return err
	}
	i, err := f.lookupLocked(id)
	if err != nil {
		return err
	}
	i.State = sandbox.StateStopped
	return nil
}

func (f *fakeBackend) Resume(ctx context.Context, id string) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Resume"); err != nil {
		return sandbox.Info{}, err
	}
	i, err := f.lookupLocked(id)
	if err != nil {
		return sandbox.Info{}, err
	}
	i.State = sandbox.StateRunning
	return *i, nil
}

func (f *fakeBackend) Fork(ctx context.Context, snapshotID string, o sandbox.ForkOverrides) (sandbox.Info, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Fork"); err != nil {
		return sandbox.Info{}, err
	}
	spec, ok := f.snaps[snapshotID]
	if !ok {
		return sandbox.Info{}, fmt.Errorf("no snapshot %q: %w", snapshotID, sandbox.ErrNotFound)
	}
	return f.addLocked(o.Apply(spec)), nil
}

func (f *fakeBackend) Terminate(ctx context.Context, id string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Terminate"); err != nil {
		return err
	}
	if _, err := f.lookupLocked(id); err != nil {
		return err
	}
	delete(f.boxes, id)
	return nil
}

func (f *fakeBackend) Usage(ctx context.Context, id string) (sandbox.Usage, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.call("Usage"); err != nil {
		return sandbox.Usage{}, err
	}
	if _, err := f.lookupLocked(id); err != nil {
		return sandbox.Usage{}, err
	}
	return sandbox.Usage{MemoryBytes: 3 << 20, MemoryLimit: 256 << 20, CPUNanos: int64(time.Millisecond), Pids: 2}, nil
}

func (f *fakeBackend) Dial(ctx context.Context, id string, port int) (net.Conn, error) {
	f.mu.Lock()
	if err := f.call("Dial"); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	if _, err := f.lookupLocked(id); err != nil {
		f.mu.Unlock()
		return nil, err
	}
	dial := f.dial
	f.mu.Unlock()
	if dial == nil {
		return nil, sandbox.ErrUnsupported
	}
	return dial(id, port)
}

func (f *fakeBackend) has(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, ok := f.boxes[id]
	return ok
}

func (f *fakeBackend) state(id string) sandbox.State {
	f.mu.Lock()
	defer f.mu.Unlock()
	if i := f.boxes[id]; i != nil {
		return i.State
	}
	return ""
}

// fakeAPI is a SandboxAPI that answers 200 with the sandbox id, or
// blocks until release is closed when the path is /block.
type fakeAPI struct {
	mu      sync.Mutex
	served  []string
	forgot  []string
	release chan struct{}
	entered chan struct{}
}

func (a *fakeAPI) ServeSandbox(w http.ResponseWriter, r *http.Request, id string) {
	a.mu.Lock()
	a.served = append(a.served, id+" "+r.URL.Path)
	a.mu.Unlock()
	if r.URL.Path == "/block" {
		a.entered <- struct{}{}
		<-a.release
	}
	if r.URL.Path == "/body" {
		if _, err := readAllBody(r); err != nil {
			w.WriteHeader(http.StatusRequestEntityTooLarge)
			return
		}
	}
	w.Header().Set("X-Sandbox", id)
	w.WriteHeader(http.StatusOK)
}

func (a *fakeAPI) Forget(id string) {
	a.mu.Lock()
	a.forgot = append(a.forgot, id)
	a.mu.Unlock()
}
