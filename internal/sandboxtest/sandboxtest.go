// Package sandboxtest holds the helpers that the tests of several
// packages (sandbox, sandbox/manager, sandbox/supervised) share: a Local
// backend closed with the test, waiting and leak checks, and the test
// probe, a static program mounted into sandboxes to act from inside.
package sandboxtest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// NewLocal returns a Local backend closed when the test ends.
func NewLocal(t testing.TB, opts sandbox.LocalOptions) *sandbox.Local {
	t.Helper()
	l, err := sandbox.NewLocal(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = l.Close(context.Background()) })
	return l
}

// Eventually polls cond every 5 ms for up to 10 s.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// AssertGone checks that a sandbox's init and cgroups no longer exist.
func AssertGone(t *testing.T, s sandbox.Info) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for PIDAlive(s.InitPID) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if PIDAlive(s.InitPID) {
		t.Errorf("init %d of %s outlived it", s.InitPID, s.ID)
	}
	for _, c := range s.CgroupPaths {
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("cgroup %s of %s left behind (%v)", c, s.ID, err)
		}
	}
}

// PIDAlive reports whether pid exists and is not a zombie.
func PIDAlive(pid int) bool {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	_, after, _ := strings.Cut(string(b), ") ")
	return !strings.HasPrefix(after, "Z")
}

// AssertNoProcess fails when a process with exactly argv as its command
// line still runs a second from now.
func AssertNoProcess(t *testing.T, argv ...string) {
	t.Helper()
	want := []byte(strings.Join(argv, "\x00") + "\x00")
	deadline := time.Now().Add(time.Second)
	for {
		found := ""
		ents, _ := os.ReadDir("/proc")
		for _, e := range ents {
			if _, err := strconv.Atoi(e.Name()); err != nil {
				continue
			}
			b, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
			if bytes.Equal(b, want) {
				found = e.Name()
			}
		}
		if found == "" {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("process %s (%v) outlived its sandbox", found, argv)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ProbeTarget is where the test probe is mounted inside sandboxes.
const ProbeTarget = "/opt/probe"

// ProbeDir returns a world-readable directory holding the static
// testprobe binary: $TENT_PROBE's directory when set (the unprivileged
// and VM runs build it once), else a fresh build, which [Run] removes.
var ProbeDir = sync.OnceValues(func() (string, error) {
	if p := os.Getenv("TENT_PROBE"); p != "" {
		return filepath.Dir(p), nil
	}
	dir, err := os.MkdirTemp("", "tent-probe-")
	if err != nil {
		return "", err
	}
	builtProbe.Store(&dir)
	if err := os.Chmod(dir, 0o755); err != nil {
		return "", err
	}
	_, file, _, _ := runtime.Caller(0)
	cmd := exec.Command("go", "build", "-o", filepath.Join(dir, "testprobe"), "./internal/testprobe")
	cmd.Dir = filepath.Join(filepath.Dir(file), "..", "..")
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", &buildError{out: out, err: err}
	}
	return dir, nil
})

// builtProbe is the directory ProbeDir built, if it built one.
var builtProbe atomic.Pointer[string]

// Run runs the package's tests (m.Run) and then removes the probe
// directory ProbeDir built, if any: a test binary must leave nothing in
// the host's temporary directory. It returns m.Run's status.
func Run(m *testing.M) int {
	code := m.Run()
	if dir := builtProbe.Load(); dir != nil {
		_ = os.RemoveAll(*dir)
	}
	return code
}

type buildError struct {
	out []byte
	err error
}

func (e *buildError) Error() string { return e.err.Error() + ": " + string(e.out) }

// HostTree describes every entry beneath root: "d -rwxr-xr-x",
// "f -rw-r--r-- data", "l target".
func HostTree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		switch {
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			out[rel] = "l " + l
		case fi.IsDir():
			out[rel] = "d " + fi.Mode().Perm().String()
		case !fi.Mode().IsRegular():
			out[rel] = "? " + fi.Mode().String()
		default:
			b, _ := os.ReadFile(p)
			out[rel] = "f " + fi.Mode().Perm().String() + " " + string(b)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// SameTree fails the test for each entry where got and want differ.
func SameTree(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	var keys []string
	for k := range got {
		keys = append(keys, k)
	}
	for k := range want {
		if _, ok := got[k]; !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		if got[k] != want[k] {
			t.Errorf("%s: %s is %q, want %q", what, k, got[k], want[k])
		}
	}
}

// Info describes the sandbox ref names in b (Open, then Info).
func Info(ctx context.Context, b sandbox.Backend, ref string) (sandbox.Info, error) {
	h, err := b.Open(ctx, ref)
	if err != nil {
		return sandbox.Info{}, err
	}
	return h.Info(ctx)
}

// Handle opens the sandbox ref names in b, failing the test otherwise.
func Handle(t testing.TB, b sandbox.Backend, ref string) sandbox.Handle {
	t.Helper()
	h, err := b.Open(context.Background(), ref)
	if err != nil {
		t.Fatalf("open %s: %v", ref, err)
	}
	return h
}

// ByID is a test double's verbs keyed by sandbox id, as fakes write them
// (see HandleByID).
type ByID interface {
	Get(ctx context.Context, id string) (sandbox.Info, error)
	Exec(ctx context.Context, id string, req sandbox.ExecRequest) (*sandbox.ExecResult, error)
	File(ctx context.Context, id string, req sandbox.FileRequest) error
	Mount(ctx context.Context, id string, m sandbox.Mount) error
	SetNetworkPolicy(ctx context.Context, id string, p sandbox.NetworkPolicy) error
	Snapshot(ctx context.Context, id string) (*sandbox.Snapshot, error)
	Suspend(ctx context.Context, id string) error
	Resume(ctx context.Context, id string) (sandbox.Info, error)
	Stop(ctx context.Context, id string) error
	Terminate(ctx context.Context, id string) error
	Usage(ctx context.Context, id string) (sandbox.Usage, error)
	Dial(ctx context.Context, id string, port int) (net.Conn, error)
}

// HandleByID is the sandbox.Handle of sandbox id whose verbs are b's: a
// fake backend's Open.
func HandleByID(b ByID, id string) sandbox.Handle { return byID{b, id} }

type byID struct {
	b  ByID
	id string
}

func (h byID) ID() string                                       { return h.id }
func (h byID) Info(ctx context.Context) (sandbox.Info, error)   { return h.b.Get(ctx, h.id) }
func (h byID) Suspend(ctx context.Context) error                { return h.b.Suspend(ctx, h.id) }
func (h byID) Resume(ctx context.Context) (sandbox.Info, error) { return h.b.Resume(ctx, h.id) }
func (h byID) Stop(ctx context.Context) error                   { return h.b.Stop(ctx, h.id) }
func (h byID) Terminate(ctx context.Context) error              { return h.b.Terminate(ctx, h.id) }
func (h byID) Usage(ctx context.Context) (sandbox.Usage, error) { return h.b.Usage(ctx, h.id) }
func (h byID) Exec(ctx context.Context, req sandbox.ExecRequest) (*sandbox.ExecResult, error) {
	return h.b.Exec(ctx, h.id, req)
}
func (h byID) File(ctx context.Context, req sandbox.FileRequest) error {
	return h.b.File(ctx, h.id, req)
}
func (h byID) Mount(ctx context.Context, m sandbox.Mount) error { return h.b.Mount(ctx, h.id, m) }
func (h byID) SetNetworkPolicy(ctx context.Context, p sandbox.NetworkPolicy) error {
	return h.b.SetNetworkPolicy(ctx, h.id, p)
}
func (h byID) Snapshot(ctx context.Context) (*sandbox.Snapshot, error) {
	return h.b.Snapshot(ctx, h.id)
}
func (h byID) Dial(ctx context.Context, port int) (net.Conn, error) {
	return h.b.Dial(ctx, h.id, port)
}

// Start fails with sandbox.ErrUnsupported: a fake backend runs no process.
func (h byID) Start(context.Context, sandbox.ExecRequest, sandbox.StartOptions) (sandbox.Process, error) {
	return nil, fmt.Errorf("%w: this fake backend starts no process", sandbox.ErrUnsupported)
}

// Process fails with sandbox.ErrNoProcess: a fake backend has none.
func (h byID) Process(_ context.Context, pid int) (sandbox.Process, error) {
	return nil, fmt.Errorf("%w: %d", sandbox.ErrNoProcess, pid)
}

// SetLimits fails with sandbox.ErrUnsupported: a fake backend has no
// cgroup.
func (h byID) SetLimits(context.Context, sandbox.Limits) error {
	return fmt.Errorf("%w: this fake backend has no limits to change", sandbox.ErrUnsupported)
}

// Processes returns none.
func (h byID) Processes(context.Context) ([]sandbox.ProcessInfo, error) { return nil, nil }

// errNoFiles is the typed file verbs' error: a fake backend has no files.
var errNoFiles = fmt.Errorf("%w: this fake backend has no files", sandbox.ErrUnsupported)

// ReadFile fails with sandbox.ErrUnsupported, as the other file verbs do.
func (h byID) ReadFile(context.Context, string, io.Writer, sandbox.ReadOptions) error {
	return errNoFiles
}
func (h byID) WriteFile(context.Context, string, io.Reader, sandbox.WriteOptions) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, errNoFiles
}
func (h byID) Stat(context.Context, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, errNoFiles
}
func (h byID) ReadDir(context.Context, string, int) ([]sandbox.FileInfo, error) {
	return nil, errNoFiles
}
func (h byID) Mkdir(context.Context, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, errNoFiles
}
func (h byID) Rename(context.Context, string, string) (sandbox.FileInfo, error) {
	return sandbox.FileInfo{}, errNoFiles
}
func (h byID) Remove(context.Context, string, bool) error { return errNoFiles }
func (h byID) Watch(context.Context, string, sandbox.WatchOptions) (<-chan sandbox.WatchEvent, error) {
	return nil, errNoFiles
}
