//go:build linux

package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox"
)

// shOut runs script with sh in sb: its trimmed stdout and stderr and its
// exit code.
func shOut(t *testing.T, sb *sandbox.Sandbox, script string, env ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", script}, Env: env, Stdout: &out, Stderr: &errb})
	if err != nil {
		t.Fatalf("%s: %v", script, err)
	}
	return strings.TrimSpace(out.String()), strings.TrimSpace(errb.String()), res.ExitCode
}

// needSudoDir skips a test of sudo on a host without /usr/local/bin,
// where sudo appears (Spec.Sudo gives none there).
func needSudoDir(t *testing.T) {
	t.Helper()
	if fi, err := os.Stat("/usr/local/bin"); err != nil || !fi.IsDir() {
		t.Skip("this host has no /usr/local/bin, where sudo appears")
	}
}

// Spec.Sudo: sudo (found first on every PATH, a login shell's too) runs
// the command as root of a nested user namespace: whoami root, id -u 0,
// sudo's clean environment (plain sudo drops a variable, -E keeps it),
// the exit status passed on; and nothing more: a read-only mount stays
// EROFS, mounting EPERM, another user is refused.
func TestSudo(t *testing.T) {
	needSudoDir(t)
	sb := provision(t, withProbe(t, sandbox.Spec{Identity: sandbox.Identity{Sudo: true, User: &sandbox.User{UID: 1000, GID: 1000, Name: "user"}}}))
	if out, errs, code := shOut(t, sb, `command -v sudo; sudo whoami; sudo id -u; sudo id -g; id -u`); code != 0 || out != "/usr/local/bin/sudo\nroot\n0\n0\n1000" {
		t.Errorf("sudo whoami, id: %q (stderr %q, exit %d)", out, errs, code)
	}
	// A login shell resets PATH (the E2B SDKs run every command so):
	// sudo is still found. Hosts without bash (the VM) check sh's alone.
	if _, err := os.Stat("/bin/bash"); err == nil {
		if out, errs, code := shOut(t, sb, `bash -l -c 'command -v sudo; sudo echo "$FOO"x'`, "FOO=bar"); code != 0 || out != "/usr/local/bin/sudo\nbarx" {
			t.Errorf("sudo in a login shell: %q (stderr %q, exit %d)", out, errs, code)
		}
	}
	out, errs, code := shOut(t, sb, `sudo sh -c 'echo "[$FOO] $HOME $USER $LOGNAME $SUDO_USER $SUDO_UID $SUDO_GID"'; sudo -E sh -c 'echo "[$FOO] $USER"'; sudo BAR=baz sh -c 'echo "[$BAR]"'; sudo -u root -n -- sh -c 'exit 7'; echo $?`, "FOO=bar")
	if code != 0 || out != "[] /root root root user 1000 1000\n[bar] root\n[baz]\n7" {
		t.Errorf("sudo's environment and status: %q (stderr %q, exit %d)", out, errs, code)
	}
	if out, errs, code := shOut(t, sb, `cd /tmp && sudo -i pwd; sudo -s -- id -un`); code != 0 || out != "/tmp\nroot" || !strings.Contains(errs, "unable to change directory to /root") {
		t.Errorf("sudo -i, -s: %q (stderr %q, exit %d)", out, errs, code)
	}
	// Nothing beyond the sandbox's user.
	if out, _, _ := shOut(t, sb, `sudo `+probeTarget+`/testprobe open /usr/x c; sudo `+probeTarget+`/testprobe mkdir /etc/x`); out != "EROFS\nEROFS" {
		t.Errorf("sudo writing read-only paths: %q, want EROFS twice", out)
	}
	if out, errs, _ := shOut(t, sb, `sudo `+probeTarget+`/testprobe syscall 165`); out != "EPERM" {
		t.Errorf("sudo mount(2): %q (stderr %q), want EPERM", out, errs)
	}
	if out, errs, _ := shOut(t, sb, `sudo `+probeTarget+`/testprobe unshare 0x10000000`); out != "EPERM" {
		t.Errorf("sudo unshare: %q (stderr %q), want EPERM", out, errs)
	}
	if _, errs, code := shOut(t, sb, `sudo -u nobody id`); code != 1 || !strings.Contains(errs, "root only") {
		t.Errorf("sudo -u nobody: exit %d, stderr %q; want 1 and a refusal", code, errs)
	}
	if _, errs, code := shOut(t, sb, `sudo -X id`); code != 1 || !strings.Contains(errs, "-X is not supported") {
		t.Errorf("sudo -X: exit %d, stderr %q; want 1 and a refusal", code, errs)
	}
	// A command already root (ExecRequest.AsRoot, E2B's user "root") may
	// use sudo too.
	var out2 bytes.Buffer
	if res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", "sudo id -u; sudo sh -c 'echo $SUDO_UID'"}, AsRoot: true, Stdout: &out2}); err != nil || res.ExitCode != 0 || out2.String() != "0\n0\n" {
		t.Errorf("sudo as root: %v, %+v, %q", err, res, out2.String())
	}
	// Without Spec.Sudo, no sudo of tent's.
	plain := provision(t, sandbox.Spec{})
	if out, _, _ := shOut(t, plain, `test -e /run/tent/sudo.sock && echo sock; command -v sudo || true`); out != "" {
		t.Errorf("a sandbox without Sudo has %q", out)
	}
}

// A command waiting for sudo wakes a sandbox whose init is idle (in the
// idle holder): the holder watches the sudo socket too.
func TestSudoWakesIdleInit(t *testing.T) {
	needSudoDir(t)
	needHolder(t)
	sb, err := sandbox.Provision(context.Background(), sandbox.Spec{Identity: sandbox.Identity{Sudo: true}}, sandbox.ProvisionOptions{IdleAfter: idleAfter})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = sb.Terminate(context.Background()) })
	// An orphan (which does not keep the init busy) calls sudo once the
	// init has given way to the idle holder.
	shOut(t, sb, `(until tr '\0' ' ' < /proc/1/cmdline | grep -q '^`+namespaces.IdleArg0+` '; do sleep 0.05; done
		sudo id -u > /tmp/o.new 2>&1; mv /tmp/o.new /tmp/o) >/dev/null 2>&1 &`)
	root := "/proc/" + strconv.Itoa(sb.Info().InitPID) + "/root/tmp/"
	if !waitFor(30*time.Second, func() bool { b, err := os.ReadFile(root + "o"); return err == nil && string(b) == "0\n" }) {
		b, _ := os.ReadFile(root + "o")
		t.Fatalf("sudo from an idle sandbox: %q (init %q)", b, initArgv0(t, sb))
	}
}

// A sudo that dies (SIGKILL) takes its command with it; a connection that
// never sends a request, or sends garbage, harms no later sudo.
func TestSudoClientGone(t *testing.T) {
	needSudoDir(t)
	sb := provision(t, sandbox.Spec{Identity: sandbox.Identity{Sudo: true}})
	count := `for p in /proc/[0-9]*; do tr '\0' ' ' < $p/cmdline; echo; done 2>/dev/null | grep -c '^sleep 1000' || true`
	// The wait for sudo's command is bounded (a minute) so that a sudo
	// that never starts it fails the test rather than hangs it.
	shOut(t, sb, `sudo sleep 1000 & p=$!; i=0; while [ "$(`+count+`)" = 0 ] && [ $i -lt 1200 ]; do sleep 0.05; i=$((i+1)); done; kill -9 $p`)
	if !waitFor(30*time.Second, func() bool { out, _, _ := shOut(t, sb, count); return out == "0" }) {
		t.Fatal("sudo's command outlived its killed sudo")
	}
	if _, err := os.Stat("/usr/bin/python3"); err != nil {
		t.Skip("no python3 to be a hostile client with")
	}
	// A client that sends nothing, and one that sends garbage without
	// descriptors.
	shOut(t, sb, `python3 -c '
import socket, time
s = socket.socket(socket.AF_UNIX); s.connect("/run/tent/sudo.sock")
g = socket.socket(socket.AF_UNIX); g.connect("/run/tent/sudo.sock"); g.sendall(b"\xff\xff\xff\x7fgarbage")
time.sleep(20)' >/dev/null 2>&1 &`)
	if out, errs, code := shOut(t, sb, `sleep 0.2; sudo id -u`); out != "0" || code != 0 {
		t.Errorf("sudo beside hostile clients: %q (stderr %q, exit %d)", out, errs, code)
	}
}

// Sudo refuses a spec whose mounts are where its own go, rather than
// hide them or create mount points in them.
func TestSudoRefusesConflictingMounts(t *testing.T) {
	dir := t.TempDir()
	for _, target := range []string{"/run", "/run/tent", "/run/tent/x", "/usr/local/bin", "/usr/local"} {
		_, err := sandbox.Provision(context.Background(), sandbox.Spec{Identity: sandbox.Identity{Sudo: true}, Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: dir, Target: target, Access: sandbox.ReadOnly}}}}, sandbox.ProvisionOptions{})
		if !errorsIs(err, sandbox.ErrInvalidSpec) || !strings.Contains(err.Error(), "sudo") {
			t.Errorf("sudo with a mount at %s: %v, want ErrInvalidSpec naming sudo", target, err)
		}
	}
	if _, err := sandbox.Provision(context.Background(), sandbox.Spec{Identity: sandbox.Identity{Sudo: true}, Filesystem: sandbox.Filesystem{Tmpfs: []string{"/run"}}}, sandbox.ProvisionOptions{}); !errorsIs(err, sandbox.ErrInvalidSpec) {
		t.Errorf("sudo with a tmpfs at /run: %v, want ErrInvalidSpec", err)
	}
}
