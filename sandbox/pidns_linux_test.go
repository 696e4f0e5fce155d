package sandbox_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/sandbox"
)

// A sandbox in another sandbox's pid namespace (ProvisionOptions.
// PIDNamespace, tent-runc's shareProcessNamespace) sees that sandbox's
// processes, cannot signal them (EPERM: Landlock's signal scope) or read
// their environment (EACCES), is not PID 1 there, and takes what it
// leaves running along when it ends (its cgroup). A namespace of the
// caller's own user namespace is refused, and so are an unprivileged
// caller and a kernel without Landlock's signal scope (ABI 6).
func TestSharedPIDNamespace(t *testing.T) {
	ctx := context.Background()
	// The pod's init never idles: the idle holder seen below is the
	// joined sandbox's.
	pod, err := sandbox.Provision(ctx, sandbox.Spec{Identity: sandbox.Identity{Env: []string{"POD_SECRET=s3cret"}}}, sandbox.ProvisionOptions{IdleAfter: -1})
	if err != nil {
		t.Fatal(err)
	}
	defer pod.Terminate(ctx)
	run := func(sb *sandbox.Sandbox, script string) (string, int) {
		t.Helper()
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", script}})
		if err != nil {
			t.Fatalf("exec %q: %v", script, err)
		}
		return strings.TrimSpace(string(res.Stdout) + string(res.Stderr)), res.ExitCode
	}
	if out, code := run(pod, "sleep 1001 >/dev/null 2>&1 & echo started"); code != 0 {
		t.Fatalf("starting the pod's sleep: %d %s", code, out)
	}

	host, err := os.Open("/proc/self/ns/pid")
	if err != nil {
		t.Fatal(err)
	}
	defer host.Close()
	if _, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{PIDNamespace: host}); !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "PIDNamespace") {
		t.Errorf("the host's pid namespace: %v, want ErrInvalidSpec naming PIDNamespace", err)
	}
	netns, err := os.Open("/proc/self/ns/net")
	if err != nil {
		t.Fatal(err)
	}
	defer netns.Close()
	if _, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{PIDNamespace: netns}); !errors.Is(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "not a pid namespace") {
		t.Errorf("a network namespace as PIDNamespace: %v, want ErrInvalidSpec", err)
	}

	podNS, err := os.Open(fmt.Sprintf("/proc/%d/ns/pid", pod.Info().InitPID))
	if err != nil {
		t.Fatal(err)
	}
	defer podNS.Close()
	// A short IdleAfter: the init is handed to its idle holder (seen
	// below), which must keep it all working there too.
	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{PIDNamespace: podNS, IdleAfter: 20 * time.Millisecond})
	if !privileged() {
		if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "needs root") {
			t.Errorf("an unprivileged caller's PIDNamespace: %v, want ErrUnsupported (needs root)", err)
		}
		if err == nil {
			sb.Terminate(ctx)
		}
		return
	}
	if abi, _ := fs.LandlockABI(); abi < 6 {
		// No signal scope: the commands could stop their init, which is
		// not PID 1 there. Refused, naming what is missing.
		if !errors.Is(err, sandbox.ErrUnsupported) || !strings.Contains(err.Error(), "Landlock's signal scope") {
			t.Errorf("PIDNamespace under Landlock ABI %d: %v, want ErrUnsupported naming Landlock's signal scope", abi, err)
		}
		if err == nil {
			sb.Terminate(ctx)
		}
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	defer sb.Terminate(ctx)
	idle := `for p in /proc/[0-9]*; do case "$(tr '\0' ' ' < $p/cmdline)" in tent-idle*) echo idle;; esac; done`
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if out, _ := run(pod, idle); out == "idle" {
			break
		}
		if time.Now().After(end) {
			t.Fatal("the joined sandbox's init was not handed to its idle holder")
		}
	}
	find := `for p in /proc/[0-9]*; do if [ "$(tr '\0' ' ' < $p/cmdline 2>/dev/null)" = "sleep 1001 " ]; then echo ${p#/proc/}; fi; done`
	pid, _ := run(sb, find)
	if pid == "" {
		listing, _ := run(sb, "ls /proc")
		t.Fatalf("the pod's sleep is not in the joined namespace's /proc: %s", listing)
	}
	if out, _ := run(sb, "echo $$; tr '\\0' ' ' < /proc/1/cmdline"); strings.HasPrefix(out, "1\n") || !strings.Contains(out, "tent-init") {
		t.Errorf("the joining sandbox's shell and /proc/1: %q, want a pid other than 1, and the pod's init at 1", out)
	}
	if out, code := run(sb, "kill -TERM "+pid); code != 1 || !strings.Contains(out, "Operation not permitted") {
		t.Errorf("kill of the pod's sleep: %d %q, want EPERM", code, out)
	}
	if out, code := run(sb, "cat /proc/"+pid+"/environ"); code != 1 || !strings.Contains(out, "Permission denied") || strings.Contains(out, "s3cret") {
		t.Errorf("the pod's sleep's environ: %d %q, want EACCES", code, out)
	}
	if out, _ := run(pod, find); out != pid {
		t.Errorf("the pod's sleep after the refused signal: %q, want %s still there", out, pid)
	}
	// What the joining sandbox leaves running goes with it.
	if out, code := run(sb, "setsid sleep 1002 >/dev/null 2>&1 & echo ok"); code != 0 {
		t.Fatalf("setsid sleep: %d %s", code, out)
	}
	find2 := strings.ReplaceAll(find, "1001", "1002")
	if out, _ := run(pod, find2); out == "" {
		t.Fatal("the pod does not see the joining sandbox's setsid sleep")
	}
	if err := sb.Terminate(ctx); err != nil {
		t.Fatal(err)
	}
	for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		out, _ := run(pod, find2)
		if out == "" {
			break
		}
		if time.Now().After(end) {
			t.Fatalf("the joining sandbox's setsid sleep outlived it: pid %s in the pod", out)
		}
	}
}
