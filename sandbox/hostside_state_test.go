package sandbox_test

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// supervise serves sb under a fresh id in store until the test ends.
func supervise(t *testing.T, store sandbox.Store, sb *sandbox.Sandbox) *sandbox.Record {
	t.Helper()
	rec := &sandbox.Record{ID: sandbox.NewID(), Created: time.Now()}
	ready := make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- sandbox.Supervise(ctx, store, rec, sb, func() { close(ready) }) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("supervise: %v", err)
		}
	})
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("supervise: %v", err)
	}
	got, err := store.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	return got
}

// The attack: a sandbox that sees the state directory (here a read-only
// mount of it) connects to its own supervisor's socket, and to another
// sandbox's, and asks them to attach a host directory it must not see.
// Each must refuse before reading the request, whatever the sandbox's
// uid.
func TestSupervisorRefusesPeersInsideSandboxes(t *testing.T) {
	store := sandbox.Store{Dir: t.TempDir()}
	// Let any uid reach the sockets, so that as root too (the sandbox runs
	// as an unprivileged host id) only the peer check stands in the way.
	if err := os.Chmod(store.Dir, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := withProbe(t, sandbox.Spec{Mounts: []sandbox.Mount{{Source: store.Dir, Target: "/state", Access: sandbox.ReadOnly}}})
	attacker := provision(t, spec)
	own := supervise(t, store, attacker)
	other := supervise(t, store, provision(t, sandbox.Spec{}))
	for _, rec := range []*sandbox.Record{own, other} {
		if err := os.Chmod(store.SocketPath(rec.ID), 0o777); err != nil {
			t.Fatal(err)
		}
	}
	victim := t.TempDir()
	if err := os.WriteFile(filepath.Join(victim, "secret"), []byte("SECRET\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(victim, 0o755); err != nil {
		t.Fatal(err)
	}
	attach := `{"op":"attach","mount":{"source":"` + victim + `","target":"/loot","access":"ro"}}`
	for name, rec := range map[string]*sandbox.Record{"its own supervisor": own, "another sandbox's supervisor": other} {
		out, _ := execOut(t, attacker, sandbox.ExecRequest{Args: []string{probeTarget + "/testprobe", "seqpacket", "/state/" + rec.ID + ".sock", attach}})
		var reply struct {
			Error string `json:"error"`
			Code  int    `json:"code"`
		}
		if err := json.Unmarshal([]byte(out), &reply); err != nil {
			t.Fatalf("%s: reply %q: %v", name, out, err)
		}
		if reply.Code != 125 || !strings.HasPrefix(reply.Error, "refused: only processes outside the sandbox") {
			t.Errorf("%s: reply %+v, want the peer refusal", name, reply)
		}
	}
	if out, _ := execOut(t, attacker, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat /loot/secret 2>&1 || true"}}); strings.Contains(out, "SECRET") {
		t.Fatal("the sandbox attached a host directory through its supervisor")
	}
	// The owner, outside, is served.
	if err := sandbox.RemoteAttach(other, sandbox.Mount{Source: victim, Target: "/given", Access: sandbox.ReadOnly}); err != nil {
		t.Fatalf("the owner's attach: %v", err)
	}
}

// The attack: a state directory someone else may write (here mode 0777)
// holds a planted record whose cow layer is a victim directory; tent
// must refuse the directory before acting on any record in it.
func TestStateDirMustBeTheCallers(t *testing.T) {
	dir := t.TempDir()
	victim := filepath.Join(t.TempDir(), "tent-cow-0123456789abcdef")
	if err := os.MkdirAll(filepath.Join(victim, "0", "upper"), 0o700); err != nil {
		t.Fatal(err)
	}
	rec := sandbox.Record{ID: "0123456789abcdef", State: "stopped", Layers: []sandbox.CowLayer{{Upper: filepath.Join(victim, "0", "upper")}}}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(dir, rec.ID+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	store := sandbox.Store{Dir: dir}
	if _, err := store.List(); !errors.Is(err, sandbox.ErrUnsafeStateDir) || !strings.Contains(err.Error(), "chmod go-w") {
		t.Fatalf("List of a 0777 state directory: %v, want ErrUnsafeStateDir", err)
	}
	if _, err := store.Snapshots(); !errors.Is(err, sandbox.ErrUnsafeStateDir) {
		t.Fatalf("Snapshots of a 0777 state directory: %v, want ErrUnsafeStateDir", err)
	}
	store.Reclaim(&rec)
	if _, err := os.Stat(filepath.Join(victim, "0", "upper")); err != nil {
		t.Fatalf("Reclaim acted on a record of an unsafe state directory: %v", err)
	}

	// A symlink to a good directory is refused too.
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(t.TempDir(), "state")
	if err := os.Symlink(dir, link); err != nil {
		t.Fatal(err)
	}
	if _, err := (sandbox.Store{Dir: link}).List(); !errors.Is(err, sandbox.ErrUnsafeStateDir) {
		t.Fatalf("List through a symlink: %v, want ErrUnsafeStateDir", err)
	}

	if os.Geteuid() == 0 {
		// Root and a directory another user owns (the attacker's).
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := store.List(); !errors.Is(err, sandbox.ErrUnsafeStateDir) || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Fatalf("root listing another user's state directory: %v, want ErrUnsafeStateDir", err)
		}
	}
}

// The attack: a record in the caller's own state directory (written by
// an older tent, or damaged) names things that are not the sandbox's: a
// cow layer outside tent's layout, cgroups outside /sys/fs/cgroup, a
// socket elsewhere. Reclaim touches none of them and the socket is
// always the one beside the record.
func TestRecordsAreValidatedBeforeActing(t *testing.T) {
	store := sandbox.Store{Dir: t.TempDir()}
	victim := t.TempDir()
	for _, d := range []string{"0/upper", "tent-x"} {
		if err := os.MkdirAll(filepath.Join(victim, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	rec := sandbox.Record{ID: "0123456789abcdef", State: "stopped",
		Socket:  filepath.Join(victim, "evil.sock"),
		Layers:  []sandbox.CowLayer{{Upper: filepath.Join(victim, "0", "upper")}, {Upper: victim + "/../" + filepath.Base(victim) + "/0/upper"}},
		Cgroups: []string{filepath.Join(victim, "tent-x"), "/sys/fs/cgroup/../../" + strings.TrimPrefix(victim, "/") + "/tent-x"}}
	b, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(store.Dir, rec.ID+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := store.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Socket != store.SocketPath(rec.ID) {
		t.Errorf("socket %q, want the one beside the record, %q", got.Socket, store.SocketPath(rec.ID))
	}
	if err := store.Remove(got); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"0/upper", "tent-x"} {
		if _, err := os.Stat(filepath.Join(victim, d)); err != nil {
			t.Errorf("Remove of a record naming %s touched it: %v", d, err)
		}
	}
	if _, err := store.Get(rec.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the record is still there: %v", err)
	}
	// A file not named after an id is no record; one that names another
	// id than its file's is refused.
	if err := os.WriteFile(filepath.Join(store.Dir, "x.json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	other := rec
	other.ID = "fedcba9876543210"
	b, _ = json.Marshal(other)
	if err := os.WriteFile(filepath.Join(store.Dir, rec.ID+".json"), b, 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := store.List(); err == nil || !strings.Contains(err.Error(), `names sandbox "fedcba9876543210"`) {
		t.Errorf("a record naming another id: %v", err)
	}
}
