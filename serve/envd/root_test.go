package envd_test

import (
	"encoding/base64"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"connectrpc.com/connect"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/serve/envd"
	"github.com/tent-sandbox/tent/serve/envd/filesystempb"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
)

// basicRoot is the Authorization header the E2B SDKs send for user "root".
var basicRoot = "Basic " + base64.StdEncoding.EncodeToString([]byte("root:"))

// runAs runs a shell command as the SDK does, as user root when root is
// set, and returns its events.
func (e *env) runAs(root bool, cmd string) *events {
	e.t.Helper()
	return e.runAsEnv(root, nil, "/bin/bash", "-l", "-c", cmd)
}

// runAsEnv runs argv with envs, as root when root is set.
func (e *env) runAsEnv(root bool, envs map[string]string, argv ...string) *events {
	e.t.Helper()
	req := connect.NewRequest(&processpb.StartRequest{Process: &processpb.ProcessConfig{Cmd: argv[0], Args: argv[1:], Envs: envs}})
	if root {
		req.Header().Set("Authorization", basicRoot)
	}
	s, err := e.proc.Start(e.ctx(), req)
	if err != nil {
		e.t.Fatal(err)
	}
	defer s.Close()
	ev := &events{}
	toEnd(e.t, s, ev)
	return ev
}

// newE2BEnv serves a sandbox made as tent serve makes them: E2B's user
// (uid 1000 "user"), /root a tmpfs, and a read-only mount at /ro.
func newE2BEnv(t *testing.T) *env {
	t.Helper()
	ro := t.TempDir()
	if err := os.WriteFile(filepath.Join(ro, "f"), []byte("ro"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	spec := sandbox.Spec{
		Identity: sandbox.Identity{
			User:    &sandbox.User{UID: 1000, GID: 1000, Name: "user"},
			Workdir: "/home/user",
		},
		Tier: sandbox.TierFull,
		Filesystem: sandbox.Filesystem{
			Tmpfs:  []string{"/root"},
			Mounts: []sandbox.Mount{{Source: ro, Target: "/ro", Access: sandbox.ReadOnly}},
		},
	}
	return newEnvSpec(t, spec, envd.Options{}, nil)
}

// TestRunAsRoot: user "root" runs commands as uid and gid 0 in their own
// view, with root's HOME and working directory; the sandbox's user stays
// the default.
func TestRunAsRoot(t *testing.T) {
	e := newE2BEnv(t)
	ev := e.runAs(true, `id -u; id -g; whoami; echo "$HOME $USER"; pwd`)
	if got, want := ev.stdout.String(), "0\n0\nroot\n/root root\n/root\n"; got != want || ev.end.GetExitCode() != 0 {
		t.Fatalf("as root: stdout %q (want %q), stderr %q, exit %d %q", got, want, ev.stderr.String(), ev.end.GetExitCode(), ev.end.GetError())
	}
	ev = e.runAs(false, `id -u; echo "$USER"; echo "$HOME"; pwd`)
	if got, want := ev.stdout.String(), "1000\nuser\n/home/user\n/home/user\n"; got != want {
		t.Fatalf("as the default user: stdout %q, want %q (stderr %q)", got, want, ev.stderr.String())
	}
	// The caller's variables reach the command, and override root's.
	ev = e.runAsEnv(true, map[string]string{"FOO": "bar", "HOME": "/tmp"}, "/bin/sh", "-c", `echo "$FOO $HOME"`)
	if got := ev.stdout.String(); got != "bar /tmp\n" {
		t.Fatalf("as root with envs: stdout %q, want \"bar /tmp\\n\" (stderr %q)", got, ev.stderr.String())
	}
	// ... but not the host binary that starts it, unrestricted, in its
	// nested namespace: the dynamic loader reports a missing preload once,
	// for the command alone.
	ev = e.runAsEnv(true, map[string]string{"LD_PRELOAD": "/nonexistent-preload.so"}, "/bin/true")
	if n := strings.Count(ev.stderr.String(), "nonexistent-preload.so"); n != 1 || ev.end.GetExitCode() != 0 {
		t.Fatalf("LD_PRELOAD as root: %d loader messages (want 1, the command's), stderr %q, exit %d", n, ev.stderr.String(), ev.end.GetExitCode())
	}
}

// TestRootWritesFilesTheUserOwns: what root writes, anywhere it may,
// belongs to the sandbox's user (the one id its namespace maps), who can
// read and change it; the user's files are root's in root's view.
func TestRootWritesFilesTheUserOwns(t *testing.T) {
	e := newE2BEnv(t)
	ev := e.runAs(true, `echo secret > /home/user/by-root && chmod 600 /home/user/by-root && echo r > /root/r && stat -c '%u:%g' /home/user/by-root /home/user`)
	if got, want := ev.stdout.String(), "0:0\n0:0\n"; got != want || ev.end.GetExitCode() != 0 {
		t.Fatalf("as root: stdout %q (want %q), stderr %q", got, want, ev.stderr.String())
	}
	ev = e.runAs(false, `stat -c '%u:%g' /home/user/by-root /root/r; cat /home/user/by-root; echo more >> /home/user/by-root && echo ok`)
	if got, want := ev.stdout.String(), "1000:1000\n1000:1000\nsecret\nok\n"; got != want {
		t.Fatalf("as user: stdout %q (want %q), stderr %q", got, want, ev.stderr.String())
	}
	// The files API as root: relative paths are beneath /root, and the
	// user's files are reported as root's.
	req := connect.NewRequest(&filesystempb.StatRequest{Path: "r"})
	req.Header().Set("Authorization", basicRoot)
	res, err := e.fs.Stat(e.ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.GetEntry(); got.GetPath() != "/root/r" || got.GetOwner() != "root" || got.GetGroup() != "root" {
		t.Fatalf("stat r as root: path %q owner %q group %q, want /root/r root root", got.GetPath(), got.GetOwner(), got.GetGroup())
	}
	res, err = e.fs.Stat(e.ctx(), connect.NewRequest(&filesystempb.StatRequest{Path: "by-root"}))
	if err != nil {
		t.Fatal(err)
	}
	if got := res.Msg.GetEntry(); got.GetPath() != "/home/user/by-root" || got.GetOwner() != "user" {
		t.Fatalf("stat by-root as user: path %q owner %q, want /home/user/by-root user", got.GetPath(), got.GetOwner())
	}
	// An upload as root (the username parameter) lands in /root.
	status, body := e.post("path=up.txt&username=root", "application/octet-stream", strings.NewReader("up"), nil)
	if status != http.StatusOK || !strings.Contains(string(body), `"path":"/root/up.txt"`) {
		t.Fatalf("upload as root: %d %s", status, body)
	}
}

// TestRootGainsNothing: root inside holds no capability and is refused
// exactly what the sandbox's user is: mounting (EPERM), writing to a
// read-only mount (EROFS), making a user namespace (EPERM), taking
// another uid (EINVAL: no other is mapped), reading the host's
// /etc/shadow (EACCES: its owner is no id of the sandbox's); it holds no
// capability, not even in its bounding set, and runs under no_new_privs
// and seccomp.
func TestRootGainsNothing(t *testing.T) {
	e := newE2BEnv(t)
	const probe = `import ctypes, os, errno
libc = ctypes.CDLL(None, use_errno=True)
def err(r):
    return errno.errorcode[ctypes.get_errno()] if r != 0 else "ok"
print("mount", err(libc.mount(b"none", b"/tmp", b"tmpfs", 0, None)))
try:
    open("/ro/f", "a")
    print("write-ro ok")
except OSError as x:
    print("write-ro", errno.errorcode[x.errno])
try:
    open("/ro/new", "w")
    print("create-ro ok")
except OSError as x:
    print("create-ro", errno.errorcode[x.errno])
print("unshare", err(libc.unshare(0x10000000)))
try:
    open("/etc/shadow").read()
    print("shadow ok")
except OSError as x:
    print("shadow", errno.errorcode[x.errno])
try:
    os.setuid(5)
    print("setuid ok")
except OSError as x:
    print("setuid", errno.errorcode[x.errno])
for l in open("/proc/self/status"):
    if l.startswith(("CapEff", "CapPrm", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp:")):
        print(l.split()[0], l.split()[1])
`
	user := e.runAs(false, "python3 -c '"+probe+"'")
	root := e.runAs(true, "python3 -c '"+probe+"'")
	if user.end.GetExitCode() != 0 || root.end.GetExitCode() != 0 {
		t.Fatalf("probe failed: user %q %q, root %q %q", user.stdout.String(), user.stderr.String(), root.stdout.String(), root.stderr.String())
	}
	shadow := "EACCES"
	if _, err := os.Stat("/etc/shadow"); os.IsNotExist(err) {
		shadow = "ENOENT" // a host without one
	}
	want := "mount EPERM\nwrite-ro EROFS\ncreate-ro EROFS\nunshare EPERM\nshadow " + shadow + "\nsetuid EINVAL\n" +
		"CapPrm: 0000000000000000\nCapEff: 0000000000000000\nCapBnd: 0000000000000000\nCapAmb: 0000000000000000\nNoNewPrivs: 1\nSeccomp: 2\n"
	if got := user.stdout.String(); got != want {
		t.Errorf("as user:\n%s\nwant:\n%s", got, want)
	}
	if got := root.stdout.String(); got != want {
		t.Errorf("as root:\n%s\nwant:\n%s", got, want)
	}
}

// TestTerminalAsRoot: a terminal (pty.create) as root is root's, and its
// shell has the terminal as its controlling one.
func TestTerminalAsRoot(t *testing.T) {
	e := newE2BEnv(t)
	req := connect.NewRequest(&processpb.StartRequest{
		Process: &processpb.ProcessConfig{Cmd: "/bin/sh", Args: []string{"-c", "echo id=$(id -u) tty=$(tty) size=$(stty size)"}},
		Pty:     &processpb.PTY{Size: &processpb.PTY_Size{Rows: 24, Cols: 80}},
	})
	req.Header().Set("Authorization", basicRoot)
	s, err := e.proc.Start(e.ctx(), req)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ev := &events{}
	toEnd(t, s, ev)
	if out := ev.pty.String(); !strings.Contains(out, "id=0 tty=/dev/pts/") || !strings.Contains(out, "size=24 80") || ev.end.GetExitCode() != 0 {
		t.Fatalf("terminal as root: %q, end %v", out, ev.end)
	}
}
