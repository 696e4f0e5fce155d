//go:build linux

package supervised

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

// The attack: a sandbox that sees the state directory (here a read-only
// mount of it) connects to its own supervisor's socket, and to another
// sandbox's, and asks them to mount a host directory it must not see.
// Each must refuse before reading the request, whatever the sandbox's
// uid.
func TestSupervisorRefusesPeersInsideSandboxes(t *testing.T) {
	b := open(t)
	// Let any uid reach the sockets, so that as root too (the sandbox runs
	// as an unprivileged host id) only the peer check stands in the way.
	if err := os.MkdirAll(b.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(b.Dir(), 0o755); err != nil {
		t.Fatal(err)
	}
	probe, err := probeDir()
	if err != nil {
		t.Fatal(err)
	}
	attacker := provision(t, b, sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{
				{Source: probe, Target: probeTarget, Access: sandbox.ReadOnly},
				{Source: b.Dir(), Target: "/state", Access: sandbox.ReadOnly}},
		},
	})
	other := provision(t, b, sandbox.Spec{})
	for _, id := range []string{attacker.ID, other.ID} {
		if err := os.Chmod(b.st.SocketPath(id), 0o777); err != nil {
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
	mount := `{"op":"mount","mount":{"source":"` + victim + `","target":"/loot","access":"ro"}}`
	for name, id := range map[string]string{"its own supervisor": attacker.ID, "another sandbox's supervisor": other.ID} {
		out, _ := execOut(t, b, attacker.ID, probeTarget+"/testprobe", "seqpacket", "/state/"+id+".sock", mount)
		var rep reply
		if err := json.Unmarshal([]byte(out), &rep); err != nil {
			t.Fatalf("%s: reply %q: %v", name, out, err)
		}
		if rep.Code != 125 || !strings.HasPrefix(rep.Error, "refused: only processes outside the sandbox") {
			t.Errorf("%s: reply %+v, want the peer refusal", name, rep)
		}
	}
	if out, _ := execOut(t, b, attacker.ID, "sh", "-c", "cat /loot/secret 2>&1 || true"); strings.Contains(out, "SECRET") {
		t.Fatal("the sandbox mounted a host directory through its supervisor")
	}
	// The owner, outside, is served.
	if err := sbOf(t, b, other.ID).Mount(context.Background(), sandbox.Mount{Source: victim, Target: "/given", Access: sandbox.ReadOnly}); err != nil {
		t.Fatalf("the owner's mount: %v", err)
	}
	if out, _ := execOut(t, b, other.ID, "cat", "/given/secret"); out != "SECRET\n" {
		t.Fatalf("the owner's mount reads %q", out)
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
	rec := record{recordHead: recordHead{ID: "0123456789abcdef", State: sandbox.StateStopped}, Layers: []sandbox.CowLayer{{Upper: filepath.Join(victim, "0", "upper")}}}
	data, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(dir, rec.ID+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	b, err := Open(dir, Options{})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := b.List(ctx); !errors.Is(err, ErrUnsafeStateDir) || !strings.Contains(err.Error(), "chmod go-w") {
		t.Fatalf("List of a 0777 state directory: %v, want ErrUnsafeStateDir", err)
	}
	if _, err := b.Snapshots(ctx); !errors.Is(err, ErrUnsafeStateDir) {
		t.Fatalf("Snapshots of a 0777 state directory: %v, want ErrUnsafeStateDir", err)
	}
	if _, err := b.Open(ctx, rec.ID); !errors.Is(err, ErrUnsafeStateDir) {
		t.Fatalf("Open in a 0777 state directory: %v, want ErrUnsafeStateDir", err)
	}
	b.st.Reclaim(&rec)
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
	if _, _, err := (stateDir{Dir: link}).List(); !errors.Is(err, ErrUnsafeStateDir) {
		t.Fatalf("List through a symlink: %v, want ErrUnsafeStateDir", err)
	}
	if os.Geteuid() == 0 {
		// Root and a directory another user owns (the attacker's).
		if err := os.Chown(dir, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		if _, err := b.List(ctx); !errors.Is(err, ErrUnsafeStateDir) || !strings.Contains(err.Error(), "belongs to uid 65534") {
			t.Fatalf("root listing another user's state directory: %v, want ErrUnsafeStateDir", err)
		}
	}
}

// The attack: a record in the caller's own state directory (written by
// an older tent, or damaged) names things that are not the sandbox's: a
// cow layer outside tent's layout, cgroups outside /sys/fs/cgroup, a
// socket elsewhere. Terminate touches none of them and the socket is
// always the one beside the record.
func TestRecordsAreValidatedBeforeActing(t *testing.T) {
	st := stateDir{Dir: t.TempDir()}
	victim := t.TempDir()
	for _, d := range []string{"0/upper", "tent-x"} {
		if err := os.MkdirAll(filepath.Join(victim, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	rec := record{recordHead: recordHead{ID: "0123456789abcdef", State: sandbox.StateStopped},
		Socket:  filepath.Join(victim, "evil.sock"),
		Layers:  []sandbox.CowLayer{{Upper: filepath.Join(victim, "0", "upper")}, {Upper: victim + "/../" + filepath.Base(victim) + "/0/upper"}},
		Cgroups: []string{filepath.Join(victim, "tent-x"), "/sys/fs/cgroup/../../" + strings.TrimPrefix(victim, "/") + "/tent-x"}}
	data, _ := json.Marshal(rec)
	if err := os.WriteFile(filepath.Join(st.Dir, rec.ID+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	got, err := st.Get(rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	if got.Socket != st.SocketPath(rec.ID) {
		t.Errorf("socket %q, want the one beside the record, %q", got.Socket, st.SocketPath(rec.ID))
	}
	b, _ := Open(st.Dir, Options{})
	if err := sbOf(t, b, rec.ID).Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"0/upper", "tent-x"} {
		if _, err := os.Stat(filepath.Join(victim, d)); err != nil {
			t.Errorf("Terminate of a record naming %s touched it: %v", d, err)
		}
	}
	if _, err := st.Get(rec.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("the record is still there: %v", err)
	}
	// A file not named after an id is no record; one that names another
	// id than its file's is refused.
	if err := os.WriteFile(filepath.Join(st.Dir, "x.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	other := rec
	other.ID = "fedcba9876543210"
	data, _ = json.Marshal(other)
	if err := os.WriteFile(filepath.Join(st.Dir, rec.ID+".json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	// It is a broken record: listed as such, the others still listed.
	if recs, broken, err := st.List(); err != nil || len(recs) != 0 || len(broken) != 1 || broken[0].ID != rec.ID ||
		!strings.Contains(broken[0].Error(), `names sandbox "fedcba9876543210"`) {
		t.Errorf("a record naming another id: %v, %v, %v", recs, broken, err)
	}
}

// Errors cross the socket as the sentinels they were made from, and the
// backend's whole lifecycle works through supervisors.
func TestBackendLifecycleAndErrors(t *testing.T) {
	b := open(t)
	ctx := context.Background()
	info := provision(t, b, sandbox.Spec{Name: "box", Labels: map[string]string{"k": "v"}})
	if info.Spec.Name != "box" || info.Spec.Labels["k"] != "v" || info.State != sandbox.StateRunning {
		t.Fatalf("info %+v", info)
	}
	if _, err := b.Provision(ctx, sandbox.Spec{Name: "box"}); !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "already used") {
		t.Fatalf("a second sandbox named box: %v", err)
	}
	if _, err := sbOf(t, b, "box").Exec(ctx, sandbox.ExecRequest{Args: []string{"no-such-command"}}); !errors.Is(err, sandbox.ErrCommandNotFound) || sandbox.ExitCode(err) != 127 {
		t.Fatalf("exec of a missing command: %v (exit %d), want ErrCommandNotFound", err, sandbox.ExitCode(err))
	}
	if _, err := b.Open(ctx, "nosuch"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("open of a missing sandbox: %v", err)
	}
	res, err := sbOf(t, b, "box").Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo out; echo err >&2; exit 3"}})
	if err != nil || res.ExitCode != 3 || string(res.Stdout) != "out\n" || string(res.Stderr) != "err\n" {
		t.Fatalf("exec: %+v, %v", res, err)
	}
	var got strings.Builder
	if _, err := sbOf(t, b, "box").WriteFile(ctx, "/tmp/f", strings.NewReader("hello"), sandbox.WriteOptions{Mode: 0o644}); err != nil {
		t.Fatal(err)
	}
	if err := sbOf(t, b, "box").ReadFile(ctx, "/tmp/f", &got, sandbox.ReadOptions{}); err != nil || got.String() != "hello" {
		t.Fatalf("read back %q, %v", got.String(), err)
	}
	if err := sbOf(t, b, "box").ReadFile(ctx, "/nonexistent", io.Discard, sandbox.ReadOptions{}); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("read of a missing file: %v, want ErrNotExist", err)
	}
	if err := sbOf(t, b, "box").SetNetworkPolicy(ctx, sandbox.NetworkPolicy{Mode: "host"}); !errors.Is(err, sandbox.ErrUnsupported) {
		t.Fatalf("switching to host: %v, want ErrUnsupported", err)
	}
	if err := sbOf(t, b, info.ID).Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := infoOf(ctx, b, info.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Fatalf("after Terminate: %v", err)
	}
}

// An error made of several sentinels keeps them all across the socket.
func TestErrorKindsCrossTogether(t *testing.T) {
	b := open(t)
	info := provision(t, b, sandbox.Spec{})
	_, err := sbOf(t, b, info.ID).Exec(context.Background(), sandbox.ExecRequest{Args: []string{"true"}, Dir: "/nonexistent"})
	if !errors.Is(err, sandbox.ErrInvalidSpec) || !errors.Is(err, sandbox.ErrWorkDir) || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("exec in a missing directory: %v, want ErrInvalidSpec, ErrWorkDir and ENOENT", err)
	}
}

// A Provision whose context ends while the supervisor provisions leaves
// nothing: no record, no supervisor, no log.
func TestProvisionCancelledLeavesNothing(t *testing.T) {
	b := open(t)
	cancelled := 0
	for _, after := range []time.Duration{0, time.Millisecond, 2 * time.Millisecond, 5 * time.Millisecond} {
		ctx, cancel := context.WithCancel(context.Background())
		go func() { time.Sleep(after); cancel() }()
		info, err := b.Provision(ctx, sandbox.Spec{})
		cancel()
		if err == nil {
			// Ready before the cancellation: an ordinary sandbox.
			if err := sbOf(t, b, info.ID).Terminate(context.Background()); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled after %v: %v, want context.Canceled", after, err)
		}
		cancelled++
	}
	if cancelled == 0 {
		t.Fatal("every provision was ready before its cancellation: nothing was tested")
	}
	if all, err := b.List(context.Background()); err != nil || len(all) != 0 {
		t.Fatalf("after cancelled provisions: %v, %v", all, err)
	}
	ents, _ := os.ReadDir(b.Dir())
	for _, e := range ents {
		if e.Name() != "snapshots" {
			t.Errorf("left in the state directory: %s", e.Name())
		}
	}
}

// A creator that dies once "ok" is written but before it acknowledged
// it (killed while the supervisor wrote, or just after it read) leaves a
// sandbox nobody knows the id of: its supervisor ends it and removes its
// record, whenever the creator's death lands. (Before the
// acknowledgement, "ok" written into the pipe of a creator that was
// being killed was taken as read, and the sandbox lived on.)
func TestCreatorGoneBeforeAckEndsTheSandbox(t *testing.T) {
	b := open(t)
	ack := acknowledge
	acknowledge = func(w *os.File) error { // read "ok", then died
		w.Close()
		return errors.New("the creator died")
	}
	t.Cleanup(func() { acknowledge = ack })
	_, err := b.Provision(context.Background(), sandbox.Spec{})
	if err == nil || !strings.Contains(err.Error(), "ended as it was ready") {
		t.Fatalf("Provision: %v, want the supervisor's end reported", err)
	}
	all, err := b.List(context.Background())
	if err != nil || len(all) != 0 {
		t.Errorf("records after the creator's death: %v, %v; want none", all, err)
	}
	if ents, _ := os.ReadDir(b.st.Dir); len(ents) > 1 { // the names lock may stay
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Errorf("state directory holds %v", names)
	}
}

// A call with a deadline against a supervisor that does not answer
// (SIGSTOPped) returns context.DeadlineExceeded once the deadline passes,
// a cancelled one context.Canceled; Terminate then kills the stopped
// supervisor rather than hang, and leaves nothing.
func TestCallsHonourContextAgainstAStoppedSupervisor(t *testing.T) {
	b := open(t)
	info := provision(t, b, sandbox.Spec{})
	sup := info.SupervisorPID
	if err := syscall.Kill(sup, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = syscall.Kill(sup, syscall.SIGCONT) })
	// The stop takes effect once each of its threads handles the signal:
	// a request sent before could still be answered (seen under qemu's
	// emulation, without a cgroup: "unsupported" at once).
	sandboxtest.Eventually(t, "every thread of the supervisor to stop", func() bool {
		stats, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", sup))
		if err != nil || len(stats) == 0 {
			return false
		}
		for _, f := range stats {
			b, err := os.ReadFile(f)
			i := bytes.LastIndexByte(b, ')')
			if err != nil || i < 0 || len(b) < i+3 || b[i+2] != 'T' {
				return false
			}
		}
		return true
	})

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	start := time.Now()
	err := sbOf(t, b, info.ID).Suspend(ctx)
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("Suspend against a stopped supervisor: %v, want context.DeadlineExceeded", err)
	}
	if waited := time.Since(start); waited > 10*time.Second {
		t.Errorf("Suspend returned after %v: not at its deadline", waited)
	}
	cctx, ccancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, ccancel)
	if err := sbOf(t, b, info.ID).Mount(cctx, sandbox.Mount{Source: t.TempDir(), Target: "/m"}); !errors.Is(err, context.Canceled) {
		t.Fatalf("Mount cancelled: %v, want context.Canceled", err)
	}

	old := removeAnswerTimeout
	removeAnswerTimeout = 200 * time.Millisecond
	t.Cleanup(func() { removeAnswerTimeout = old })
	if err := sbOf(t, b, info.ID).Terminate(context.Background()); err != nil {
		t.Fatalf("Terminate of a stopped supervisor: %v", err)
	}
	if all, _ := b.List(context.Background()); len(all) != 0 {
		t.Errorf("records after Terminate: %v", all)
	}
	// The supervisor is this process's child here (tent create's, which
	// has exited, in the CLI): reap it.
	sandboxtest.Eventually(t, "the stopped supervisor to be killed", func() bool {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(sup, &ws, syscall.WNOHANG, nil)
		return (pid == sup && ws.Signaled() && ws.Signal() == syscall.SIGKILL) || errors.Is(err, syscall.ECHILD)
	})
}
