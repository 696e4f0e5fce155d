//go:build linux

package sandbox_test

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/sandbox"
)

// reducedProbe returns spec forced into the reduced tier with the probe
// directory mounted at its own host path (the reduced tier cannot mount
// elsewhere), and the probe's path.
func reducedProbe(t *testing.T, spec sandbox.Spec) (sandbox.Spec, string) {
	t.Helper()
	dir, err := probeDir()
	if err != nil {
		t.Fatalf("building the test probe: %v", err)
	}
	spec.Tier = sandbox.TierReduced
	spec.Mounts = append([]sandbox.Mount{{Source: dir, Target: dir, Access: sandbox.ReadOnly}}, spec.Mounts...)
	if weakLandlock(t) {
		// Below ABI 6 nothing stops the command signalling the caller's
		// other processes, so the reduced tier runs only with best effort
		// (TestReducedTierRefusals checks the refusal).
		spec.BestEffort = true
	}
	return spec, filepath.Join(dir, "testprobe")
}

// weakLandlock reports whether Landlock lacks signal scoping (ABI < 6),
// which the reduced tier refuses without best effort.
func weakLandlock(t *testing.T) bool { return landlockABI(t) < 6 }

// outsideDir is a world-writable host directory that no rule allows: what
// the command cannot reach there, Landlock denies (not file modes).
func outsideDir(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "secret"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReducedTierBreakouts forces the reduced tier and tries to get out.
func TestReducedTierBreakouts(t *testing.T) {
	spec, pr := reducedProbe(t, sandbox.Spec{})
	out := outsideDir(t)
	// Landlock, not file modes: the file is world-readable, the directory
	// world-writable.
	expect(t, "read a host file outside the rules", mustRun(t, spec, pr, "open", filepath.Join(out, "secret"), "r"), "EACCES")
	expect(t, "create a file in a world-writable host dir", mustRun(t, spec, pr, "open", filepath.Join(out, "new"), "c"), "EACCES")
	// /usr is read/execute only: Landlock's EACCES (the filesystem is
	// writable, so not EROFS; file modes would say EACCES too).
	expect(t, "write to /usr", mustRun(t, spec, pr, "open", "/usr/tent-reduced-probe", "c"), "EACCES")
	expect(t, "read /root or /home", mustRun(t, spec, pr, "open", "/home", "r"), "EACCES")
	// Network none through seccomp.
	expect(t, "socket(AF_INET)", mustRun(t, spec, pr, "socket", "2", "1"), "EPERM")
	expect(t, "socket(AF_INET6)", mustRun(t, spec, pr, "socket", "10", "2"), "EPERM")
	expect(t, "socket(AF_NETLINK)", mustRun(t, spec, pr, "socket", "16", "3"), "EPERM")
	expect(t, "socket(AF_UNIX)", mustRun(t, spec, pr, "socket", "1", "1"), "ok")
	expect(t, "socketpair(AF_UNIX)", mustRun(t, spec, pr, "socketpair"), "ok")
	expect(t, "msgget (host IPC)", mustRun(t, spec, pr, "msgget", "1234"), "EPERM")
	// The private TMPDIR is writable.
	expect(t, "write $TMPDIR", mustRun(t, spec, "sh", "-c", pr+` open "$TMPDIR/x" c`), "ok")

	status := mustRun(t, spec, "grep", "-E", "^(NoNewPrivs|Seccomp|CapEff):", "/proc/self/status")
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "CapEff:\t0000000000000000"} {
		if !strings.Contains(status, want) {
			t.Errorf("/proc/self/status lacks %q:\n%s", want, status)
		}
	}
	_, cmd, err := run(t, spec, "true")
	if err != nil {
		t.Fatal(err)
	}
	if cmd.Report.Tier != sandbox.TierReduced {
		t.Errorf("report tier %q, want reduced", cmd.Report.Tier)
	}
	if p, ok := protectionOf(cmd.Report, "network"); !ok || p.Status != sandbox.Enforced {
		t.Errorf("network protection: %+v", p)
	}
}

// A host process of the same user cannot be signalled (Landlock ABI 6
// signal scoping; for a root caller the command also runs as nobody).
func TestReducedTierCannotSignalHost(t *testing.T) {
	if abi, _ := fs.LandlockABI(); abi < 6 {
		t.Skipf("Landlock ABI %d < 6: no signal scoping; the reduced tier then refuses without --best-effort", abi)
	}
	sleep := exec.Command("sleep", "60")
	if err := sleep.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = sleep.Process.Kill(); _ = sleep.Wait() }()
	spec, pr := reducedProbe(t, sandbox.Spec{})
	expect(t, "kill a host process", mustRun(t, spec, pr, "kill", strconv.Itoa(sleep.Process.Pid)), "EPERM")
	expect(t, "ptrace a host process", mustRun(t, spec, pr, "ptrace", strconv.Itoa(sleep.Process.Pid)), "EPERM")
	// Its own children it may signal.
	expect(t, "kill its own child", mustRun(t, spec, "sh", "-c", "sleep 5 & "+pr+" kill $!; kill $!"), "ok")
}

// What the reduced tier cannot give is refused, naming it, unless
// BestEffort, which runs and reports it.
func TestReducedTierRefusals(t *testing.T) {
	src := t.TempDir()
	cases := []struct {
		name, protection string
		spec             sandbox.Spec
		status           sandbox.Status
	}{
		{"hostname", "hostname", sandbox.Spec{Identity: sandbox.Identity{Hostname: "box"}}, sandbox.Absent},
		{"cow mount", "cow mount " + src, sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: src, Target: src, Access: sandbox.CopyOnWrite}}}}, sandbox.Degraded},
		{"mount elsewhere", "mount /work", sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: src, Target: "/work", Access: sandbox.ReadOnly}}}}, sandbox.Absent},
		{"limited network", "network limited", sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"example.com"}}}}, sandbox.Degraded},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec, pr := reducedProbe(t, c.spec)
			spec.BestEffort = false
			_, _, err := run(t, spec, "true")
			// Below Landlock ABI 6 the missing signal scoping is refused too.
			want := []string{c.protection}
			if weakLandlock(t) {
				want = append(want, "pid namespace")
			}
			var ue *sandbox.UnsupportedError
			if !errors.Is(err, sandbox.ErrUnsupported) || !errors.As(err, &ue) || !sameProtections(ue.Missing, want) {
				t.Fatalf("err = %v, want an UnsupportedError naming exactly %q", err, want)
			}
			if code := sandbox.ExitCode(err); code != 125 {
				t.Errorf("exit code %d, want 125", code)
			}
			spec.BestEffort = true
			out, cmd, err := run(t, spec, pr, "socket", "2", "1")
			if err != nil {
				t.Fatal(err)
			}
			expect(t, "socket(AF_INET) under best effort", out, "EPERM")
			if p, ok := protectionOf(cmd.Report, c.protection); !ok || p.Status != c.status {
				t.Errorf("report entry %q: %+v, want %s", c.protection, p, c.status)
			}
		})
	}
	// Long-lived sandboxes have no reduced tier.
	_, err := sandbox.Provision(t.Context(), sandbox.Spec{Tier: sandbox.TierReduced}, sandbox.ProvisionOptions{})
	if !errors.Is(err, sandbox.ErrUnsupported) {
		t.Errorf("Provision(reduced) = %v, want ErrUnsupported", err)
	}
}

// A timeout kills the whole tree, setsid'd and double-forked descendants
// included (the cgroup for root, the session/subreaper search otherwise),
// and nothing is left: no process, no private directory.
func TestReducedTierTimeoutKillsTree(t *testing.T) {
	spec, _ := reducedProbe(t, sandbox.Spec{Limits: sandbox.Limits{Timeout: 700 * time.Millisecond}})
	out, cmd, err := run(t, spec, "sh", "-c", `echo $TMPDIR; setsid sleep 3071 & (sleep 3072 &); (setsid sh -c 'sleep 3074 & exit') ; sleep 3073`)
	var ee *sandbox.ExitError
	if !errors.As(err, &ee) || !cmd.Report.TimedOut {
		t.Fatalf("err = %v, want a timeout", err)
	}
	if _, err := os.Stat(out); out == "" || !errors.Is(err, os.ErrNotExist) {
		t.Errorf("private directory %q left behind: %v", out, err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for {
		left := sleepers("3071", "3072", "3073", "3074")
		if len(left) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("processes left behind: %v", left)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// sleepers lists the live processes running sleep with one of args.
func sleepers(args ...string) []string {
	var left []string
	ents, _ := os.ReadDir("/proc")
	for _, e := range ents {
		b, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil {
			continue
		}
		argv := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		st, _ := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if len(argv) == 2 && filepath.Base(argv[0]) == "sleep" && containsString(args, argv[1]) && !strings.Contains(string(st), ") Z ") {
			left = append(left, e.Name()+" "+strings.Join(argv, " "))
		}
	}
	return left
}

func containsString(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// sameProtections reports whether missing names exactly want, in any order.
func sameProtections(missing []sandbox.Missing, want []string) bool {
	if len(missing) != len(want) {
		return false
	}
	for _, m := range missing {
		found := false
		for _, w := range want {
			found = found || m.Protection == w
		}
		if !found {
			return false
		}
	}
	return true
}
