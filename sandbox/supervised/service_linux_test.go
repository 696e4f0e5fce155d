package supervised

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// serviceSpec is a sandbox whose service is the test probe's HTTP server
// on port 8080, ready once the port accepts.
func serviceSpec(t *testing.T) sandbox.Spec {
	t.Helper()
	probe, err := probeDir()
	if err != nil {
		t.Fatal(err)
	}
	return sandbox.Spec{
		Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: probe, Target: probeTarget, Access: sandbox.ReadOnly}}},
		Service: &sandbox.Service{
			Command:   []string{"sh", "-c", "echo starting; exec " + probeTarget + "/testprobe httpserve 127.0.0.1:8080"},
			ReadyPort: 8080,
		},
	}
}

// servicePid is the pid of sandbox id's running service ("service"
// tag), waiting (boundedly) for one other than not.
func servicePid(t *testing.T, b *Backend, id string, not int) int {
	t.Helper()
	ctx := context.Background()
	deadline := time.Now().Add(60 * time.Second)
	for {
		procs, err := sbOf(t, b, id).Processes(ctx)
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range procs {
			if p.Tag == serviceTag && p.Running && p.Pid != not {
				return p.Pid
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: no running service (other than pid %d) in %+v", id, not, procs)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// portAccepts checks, from inside sandbox id, that port 8080 answers.
func portAccepts(t *testing.T, b *Backend, id string) {
	t.Helper()
	out, res := execOut(t, b, id, probeTarget+"/testprobe", "req", "-noproxy", "GET", "http://127.0.0.1:8080/hello")
	if res.ExitCode != 0 || !strings.HasPrefix(out, "200 ") {
		t.Fatalf("sandbox %s: the service does not answer: %q %+v", id, out, res)
	}
}

// A sandbox's service is ready when Provision returns, is listed, comes
// back when it is killed from inside, and runs again in a fork and after
// Stop and Resume.
func TestServiceKeptRunning(t *testing.T) {
	b := open(t)
	ctx := context.Background()
	info := provision(t, b, serviceSpec(t))
	portAccepts(t, b, info.ID)
	pid := servicePid(t, b, info.ID, 0)

	// Killed from inside: started again.
	if _, res := execOut(t, b, info.ID, "kill", "-9", strconv.Itoa(pid)); res.ExitCode != 0 {
		t.Fatalf("kill -9 %d: %+v", pid, res)
	}
	servicePid(t, b, info.ID, pid)
	waitAccepts(t, b, info.ID)
	if log, err := os.ReadFile(logPath(b.st, info.ID)); err != nil || !strings.Contains(string(log), "restarting it") {
		t.Errorf("the sandbox's log does not tell of the restart (%v):\n%s", err, log)
	}

	snap, err := sbOf(t, b, info.ID).Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	fork, err := b.Fork(ctx, snap.ID, sandbox.ForkOverrides{})
	if err != nil {
		t.Fatal(err)
	}
	portAccepts(t, b, fork.ID)
	servicePid(t, b, fork.ID, 0)

	if err := sbOf(t, b, info.ID).Stop(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := sbOf(t, b, info.ID).Resume(ctx); err != nil {
		t.Fatal(err)
	}
	portAccepts(t, b, info.ID)
	servicePid(t, b, info.ID, 0)
}

// waitAccepts waits (boundedly) until port 8080 answers in sandbox id:
// a restarted service is not waited for.
func waitAccepts(t *testing.T, b *Backend, id string) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		var out strings.Builder
		res, err := sbOf(t, b, id).Exec(context.Background(), sandbox.ExecRequest{Args: []string{probeTarget + "/testprobe", "req", "-noproxy", "GET", "http://127.0.0.1:8080/"}, Stdout: &out})
		if err == nil && res.ExitCode == 0 && strings.HasPrefix(out.String(), "200 ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("sandbox %s: the restarted service does not answer: %q %v", id, out.String(), err)
		}
	}
}

// A service that is never ready fails Provision with an error that names
// the check and quotes its output, and leaves nothing behind.
func TestServiceNotReady(t *testing.T) {
	for _, tc := range []struct {
		name      string
		svc       sandbox.Service
		wantInErr []string
	}{
		{"port", sandbox.Service{Command: []string{"sh", "-c", "echo up-but-deaf; echo complaint >&2; exec sleep 1001"}, ReadyPort: 9, ReadyTimeout: time.Second},
			[]string{"ready_port 9", "not ready after 1s", "up-but-deaf", "complaint"}},
		{"command", sandbox.Service{Command: []string{"sh", "-c", "echo waiting; exec sleep 1001"}, ReadyCommand: []string{"test", "-e", "/tmp/never"}, ReadyTimeout: time.Second},
			[]string{"ready_command", "status 1", "waiting"}},
		{"exits", sandbox.Service{Command: []string{"sh", "-c", "echo giving-up; exit 3"}, ReadyPort: 9},
			[]string{"exited (status 3) before it was ready", "giving-up"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b, err := Open(dir, Options{IdleAfter: -1})
			if err != nil {
				t.Fatal(err)
			}
			svc := tc.svc
			_, err = b.Provision(context.Background(), sandbox.Spec{Service: &svc})
			if !errors.Is(err, ErrServiceNotReady) {
				t.Fatalf("Provision: %v, want ErrServiceNotReady", err)
			}
			for _, want := range tc.wantInErr {
				if !strings.Contains(err.Error(), want) {
					t.Errorf("the error does not say %q: %v", want, err)
				}
			}
			if all, broken, err := b.ListAll(context.Background()); len(all)+len(broken) != 0 || err != nil {
				t.Errorf("after the failure: %v %v %v", all, broken, err)
			}
			if left, _ := filepath.Glob(filepath.Join(dir, "*")); len(left) != 0 {
				t.Errorf("left in the state directory: %v", left)
			}
			if pids := hostPidsRunning("sleep\x001001"); len(pids) != 0 {
				t.Errorf("the service still runs: pids %v", pids)
			}
		})
	}
}

// hostPidsRunning lists the host's processes whose command line contains
// args (NUL-separated).
func hostPidsRunning(args string) []int {
	var pids []int
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmdline, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if strings.Contains(string(cmdline), args) {
			pids = append(pids, pid)
		}
	}
	return pids
}

// A Local backend refuses a service: it has nobody to keep it running.
func TestLocalRefusesService(t *testing.T) {
	l, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close(context.Background())
	_, err = l.Provision(context.Background(), sandbox.Spec{Service: &sandbox.Service{Command: []string{"true"}}})
	if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "service") {
		t.Fatalf("Local.Provision with a service: %v, want ErrUnsupported", err)
	}
}

// A service that keeps dying is restarted forever, but its log lines are
// bounded: the first ten restarts, then one in a hundred.
func TestServiceRestartLogIsBounded(t *testing.T) {
	logged := 0
	for n := 1; n <= 10000; n++ {
		if loggedRestart(n) {
			logged++
		}
	}
	if logged != 10+100 || !loggedRestart(1) || !loggedRestart(10) || loggedRestart(11) || !loggedRestart(200) {
		t.Errorf("%d of 10000 restarts logged, want 110 (the first ten, then every hundredth)", logged)
	}
}
