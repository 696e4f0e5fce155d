package oci_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/oci"
)

func TestContainerd(t *testing.T) {
	e := newEnv(t)

	t.Run("echo", func(t *testing.T) {
		out, errOut, code := e.run("echo", nil, "echo", "hello from tent")
		if code != 0 || out != "hello from tent\n" {
			t.Fatalf("ctr run echo: exit %d, stdout %q, stderr %q", code, out, errOut)
		}
	})
	t.Run("exit codes", func(t *testing.T) {
		if _, errOut, code := e.run("exit7", nil, "sh", "-c", "exit 7"); code != 7 {
			t.Errorf("exit 7: ctr exited %d (%s)", code, errOut)
		}
		if _, errOut, code := e.run("term", nil, "sh", "-c", "kill -TERM $$"); code != 143 {
			t.Errorf("SIGTERM: ctr exited %d, want 143 (%s)", code, errOut)
		}
		// A command that does not exist fails when started: 127.
		if _, errOut, code := e.run("nocmd", nil, "/no/such/command"); code != 127 {
			t.Errorf("missing command: ctr exited %d, want 127 (%s)", code, errOut)
		}
	})
	t.Run("ctr task kill", func(t *testing.T) {
		// ctr run in the foreground; ctr task kill (SIGTERM) from
		// outside goes through tent-runc kill.
		cmd := exec.Command("ctr", "--address", e.sock, "--namespace", e.ns, "run", "--rm", "--runc-binary", e.runc, e.image, "fg", "sleep", "300")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		Eventually(t, "the task to run", func() bool {
			out, _, _ := e.ctr("task", "ls")
			return strings.Contains(out, "RUNNING")
		})
		if out, errOut, code := e.ctr("task", "kill", "fg"); code != 0 {
			t.Fatalf("ctr task kill: %d %s%s", code, out, errOut)
		}
		err := cmd.Wait()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 143 {
			t.Errorf("ctr run after ctr task kill: %v, want exit status 143", err)
		}
	})
}

// A detached container: exec, ps, pause and resume, kill, delete, and
// nothing left.
func TestContainerdLifecycle(t *testing.T) {
	e := newEnv(t)
	const id = "long"
	if out, errOut, code := e.ctr("run", "-d", "--runc-binary", e.runc, e.image, id, "sleep", "300"); code != 0 {
		t.Fatalf("ctr run -d: %d %s%s", code, out, errOut)
	}
	r := e.record(t, id)
	if len(r.Cgroups) == 0 {
		t.Error("the container has no cgroup")
	}
	t.Logf("record: %+v", r)
	if cfg, err := os.ReadFile(filepath.Join(e.dir, "state", "io.containerd.runtime.v2.task", e.ns, id, "config.json")); err == nil {
		var c struct{ Linux struct{ CgroupsPath string } }
		_ = json.Unmarshal(cfg, &c)
		t.Logf("cgroupsPath %q", c.Linux.CgroupsPath)
	}

	out, errOut, code := e.ctr("task", "exec", "--exec-id", "e1", id, "sh", "-c", "echo in; id -u; exit 3")
	if code != 3 || out != "in\n0\n" {
		t.Errorf("ctr task exec: exit %d, stdout %q, stderr %q; want 3 and \"in\\n0\\n\"", code, out, errOut)
	}
	// linux.cgroupsPath (/NS/ID from ctr) holds the supervisor and the
	// sandbox's cgroup (the init's, which the shim reads metrics from).
	if len(r.CgroupsPath) == 0 {
		t.Error("no cgroup was made for linux.cgroupsPath")
	}
	for _, c := range r.Cgroups {
		if !strings.Contains(c, "/"+e.ns+"/"+id+"/") {
			t.Errorf("the sandbox's cgroup %s is not beneath linux.cgroupsPath /%s/%s", c, e.ns, id)
		}
	}
	out, errOut, code = e.ctr("task", "metrics", id)
	t.Logf("metrics:\n%s", out)
	if code != 0 || !strings.Contains(out, "pids.current") {
		t.Errorf("ctr task metrics: %d %q %s", code, out, errOut)
	}
	out, errOut, code = e.ctr("task", "ps", id)
	t.Logf("ps:\n%s", out)
	if code != 0 || len(strings.Fields(out)) < 3 {
		t.Errorf("ctr task ps: %d %q %q", code, out, errOut)
	}
	// The task's pid is the container's (runc's contract): ps lists it,
	// and entering it (nsenter, CNI, kubectl debug) reaches the
	// container's namespaces, not the host's.
	ls, _, _ := e.ctr("task", "ls")
	var taskPid string
	for _, line := range strings.Split(ls, "\n") {
		if f := strings.Fields(line); len(f) >= 3 && f[0] == id {
			taskPid = f[1]
		}
	}
	if taskPid == "" || !slices.Contains(strings.Fields(out), taskPid) {
		t.Errorf("the task's pid %q is not in ctr task ps:\n%s", taskPid, out)
	}
	for _, ns := range []string{"pid", "mnt", "net", "user"} {
		inside, _ := os.Readlink("/proc/" + taskPid + "/ns/" + ns)
		ours, _ := os.Readlink("/proc/self/ns/" + ns)
		if inside == "" || inside == ours {
			t.Errorf("the task's pid %s: %s namespace %q, the host's %q: want the container's", taskPid, ns, inside, ours)
		}
	}
	// An exec'd process whose pid (the exec helper's) the shim SIGKILLs
	// ends with it: the supervisor kills the process.
	if out, errOut, code := e.ctr("task", "exec", "-d", "--exec-id", "e2", id, "sleep", "301"); code != 0 {
		t.Fatalf("ctr task exec -d: %d %s%s", code, out, errOut)
	}
	hasSleep301 := func() bool {
		for _, pid := range pidsOf(e, id) {
			if cmdline, _ := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid)); bytes.Contains(cmdline, []byte("301")) {
				return true
			}
		}
		return false
	}
	Eventually(t, "the exec'd sleep 301 to run", hasSleep301)
	if out, errOut, code := e.ctr("task", "kill", "--exec-id", "e2", "-s", "SIGKILL", id); code != 0 {
		t.Fatalf("ctr task kill --exec-id: %d %s%s", code, out, errOut)
	}
	Eventually(t, "the exec'd sleep 301 to end", func() bool { return !hasSleep301() })
	for _, step := range []struct{ verb, want string }{{"pause", "PAUSED"}, {"resume", "RUNNING"}} {
		if out, errOut, code := e.ctr("task", step.verb, id); code != 0 {
			t.Fatalf("ctr task %s: %d %s%s", step.verb, code, out, errOut)
		}
		if out, _, _ := e.ctr("task", "ls"); !strings.Contains(out, step.want) {
			t.Errorf("after %s: ctr task ls says\n%s", step.verb, out)
		}
	}
	if out, errOut, code := e.ctr("task", "kill", id); code != 0 {
		t.Fatalf("ctr task kill: %d %s%s", code, out, errOut)
	}
	Eventually(t, "the task to stop", func() bool {
		out, _, _ := e.ctr("task", "ls")
		return strings.Contains(out, "STOPPED")
	})
	if out, _, _ := e.ctr("task", "ls"); true {
		t.Logf("task ls after kill:\n%s", out)
	}
	if out, errOut, code := e.ctr("task", "rm", id); code != 0 {
		t.Errorf("ctr task rm: %d %s%s", code, out, errOut)
	}
	if out, errOut, code := e.ctr("container", "rm", id); code != 0 {
		t.Errorf("ctr container rm: %d %s%s", code, out, errOut)
	}
	e.assertGone(t, id, r)
}

// The hostile cases of tent's suite, through containerd: the host's
// files stay out of reach, set-id modes, mount and new namespaces are
// refused by seccomp, a fork bomb stops at the bundle's pids limit.
func TestContainerdHostile(t *testing.T) {
	e := newEnv(t)

	t.Run("host files", func(t *testing.T) {
		// Host paths that the image does not have: the host's binaries,
		// root's home, containerd's state (the bundle's parent).
		// tent-runc's state (the supervisors' sockets) is among them.
		out, errOut, code := e.run("files", nil, "sh", "-c", "ls -d /usr /var/lib/containerd /root/.bashrc "+e.dir+" "+e.runRoot+" 2>&1; echo end")
		if code != 0 || !strings.HasSuffix(out, "end\n") {
			t.Fatalf("exit %d, %q %q", code, out, errOut)
		}
		for _, p := range []string{"/usr", "/var/lib/containerd", "/root/.bashrc", e.dir, e.runRoot} {
			if !strings.Contains(out, p+": No such file or directory") {
				t.Errorf("%s: want ENOENT inside, got:\n%s", p, out)
			}
		}
	})
	t.Run("set-id refused", func(t *testing.T) {
		out, _, _ := e.run("setid", nil, "sh", "-c", "touch /tmp/s && chmod 4755 /tmp/s 2>&1; echo rc=$?; stat -c %a /tmp/s")
		if !strings.Contains(out, "Operation not permitted") || !strings.Contains(out, "rc=1") || !strings.HasSuffix(out, "\n644\n") {
			t.Errorf("chmod 4755: want EPERM and mode 644, got:\n%s", out)
		}
	})
	t.Run("seccomp", func(t *testing.T) {
		out, _, _ := e.run("seccomp", nil, "sh", "-c", "unshare -U true 2>&1; mount -t tmpfs none /tmp 2>&1; echo end")
		if !strings.Contains(out, "unshare(0x10000000): Operation not permitted") {
			t.Errorf("unshare -U: want EPERM, got:\n%s", out)
		}
		if !strings.Contains(out, "mount: permission denied") {
			t.Errorf("mount: want EPERM, got:\n%s", out)
		}
	})
	t.Run("with capabilities and a profile", func(t *testing.T) {
		// What a pod may add (capabilities tent grants, SYS_ADMIN which
		// it never does) and a Localhost profile that allows every call:
		// both stack on tent's own, so the hostile cases still hold, and
		// what the granted capabilities allow stays in the container's
		// user namespace.
		profile := writeJSON(t, filepath.Join(e.dir, "allow-all.json"), map[string]any{"defaultAction": "SCMP_ACT_ALLOW"})
		extra := []string{"--seccomp", "--seccomp-profile", profile, "--cap-add", "CAP_SYS_ADMIN", "--cap-add", "CAP_NET_ADMIN", "--cap-add", "CAP_DAC_READ_SEARCH"}
		out, errOut, code := e.run("capped", extra, "sh", "-c", "ls -d /usr /var/lib/containerd 2>&1; touch /tmp/s && chmod 4755 /tmp/s 2>&1; stat -c %a /tmp/s; "+
			"unshare -U true 2>&1; mount -t tmpfs none /tmp 2>&1; chown 123:123 /tmp/s && stat -c %u /tmp/s; grep CapEff /proc/self/status; echo end")
		if code != 0 || !strings.HasSuffix(out, "end\n") {
			t.Fatalf("exit %d, %q %q", code, out, errOut)
		}
		for _, want := range []string{"/usr: No such file or directory", "/var/lib/containerd: No such file or directory",
			"chmod: /tmp/s: Operation not permitted", "\n644\n", "unshare(0x10000000): Operation not permitted", "mount: permission denied", "\n123\n"} {
			if !strings.Contains(out, want) {
				t.Errorf("want %q in:\n%s", want, out)
			}
		}
		// SYS_ADMIN and DAC_READ_SEARCH are not granted: the container's
		// root holds ctr's default set (tent's granted part of it) and
		// NET_ADMIN, in its own user namespace.
		capEff := regexp.MustCompile(`CapEff:\s+([0-9a-f]+)`).FindStringSubmatch(out)
		if capEff == nil {
			t.Fatalf("no CapEff in %q", out)
		}
		eff, _ := strconv.ParseUint(capEff[1], 16, 64)
		if eff&(1<<21) != 0 || eff&(1<<2) != 0 || eff&(1<<12) == 0 || eff&1 == 0 {
			t.Errorf("CapEff %s: want CAP_NET_ADMIN and CAP_CHOWN, without CAP_SYS_ADMIN and CAP_DAC_READ_SEARCH", capEff[1])
		}
	})
	t.Run("masked and read-only paths", func(t *testing.T) {
		spec, errOut, code := e.ctr("oci", "spec")
		if code != 0 {
			t.Fatalf("ctr oci spec: %s", errOut)
		}
		var cfg map[string]any
		if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
			t.Fatal(err)
		}
		cfg["process"].(map[string]any)["args"] = []string{"sh", "-c", "cat /etc/passwd | wc -c; ls /etc/masked | wc -l; touch /run/x 2>&1; touch /tmp/x && echo tmp-ok"}
		cfg["process"].(map[string]any)["env"] = []string{"PATH=/bin"}
		rootfs := filepath.Join(e.dir, "rootfs-masked")
		writeRootfs(t, rootfs)
		for _, f := range []string{"etc/passwd", "etc/masked/secret"} {
			if err := os.MkdirAll(filepath.Dir(filepath.Join(rootfs, f)), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(rootfs, f), []byte("root:x:0:0::/root:/bin/sh\n"), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		for _, a := range []string{"cat", "ls", "touch"} {
			_ = os.Symlink("busybox", filepath.Join(rootfs, "bin", a))
		}
		cfg["root"] = map[string]any{"path": rootfs}
		linux := cfg["linux"].(map[string]any)
		linux["maskedPaths"] = []string{"/etc/passwd", "/etc/masked", "/proc/kcore"}
		linux["readonlyPaths"] = []string{"/run", "/proc/sys"}
		data, _ := json.Marshal(cfg)
		path := filepath.Join(e.dir, "masked.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := e.ctr("run", "--rm", "--runc-binary", e.runc, "--config", path, "masked")
		want := "0\n0\ntouch: /run/x: Read-only file system\ntmp-ok\n"
		if code != 0 || out != want {
			t.Errorf("exit %d, stdout %q, stderr %q; want %q (the file and directory masked, /run read-only)", code, out, errOut, want)
		}
	})
	t.Run("pids limit", func(t *testing.T) {
		// ctr has no pids flag: a bundle config of our own, with
		// linux.resources.pids.limit.
		spec, errOut, code := e.ctr("oci", "spec")
		if code != 0 {
			t.Fatalf("ctr oci spec: %s", errOut)
		}
		var cfg map[string]any
		if err := json.Unmarshal([]byte(spec), &cfg); err != nil {
			t.Fatal(err)
		}
		cfg["process"].(map[string]any)["args"] = []string{"sh", "-c", "(i=0; while [ $i -lt 40 ]; do sleep 60 & i=$((i+1)); done) 2>/tmp/err; read -r line </tmp/err; echo \"$line\"; set -- /proc/[0-9]*; echo $#"}
		cfg["process"].(map[string]any)["env"] = []string{"PATH=/bin"}
		cfg["linux"].(map[string]any)["resources"] = map[string]any{"pids": map[string]any{"limit": 16}}
		// An absolute root.path: a root filesystem of the test's own.
		rootfs := filepath.Join(e.dir, "rootfs")
		writeRootfs(t, rootfs)
		cfg["root"] = map[string]any{"path": rootfs}
		data, _ := json.Marshal(cfg)
		path := filepath.Join(e.dir, "pids.json")
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		out, errOut, code := e.ctr("run", "--rm", "--runc-binary", e.runc, "--config", path, "pids")
		t.Logf("pids: %q", out)
		lines := strings.Split(strings.TrimSpace(out), "\n")
		if code != 0 || len(lines) != 2 || !strings.Contains(lines[0], "can't fork") {
			t.Fatalf("exit %d, stdout %q, stderr %q: want a fork refused", code, out, errOut)
		}
		var n int
		// ash ends the subshell at the first fork refused; the limit counts
		// the container's tasks and the init's one thread that forks them
		// (its other threads are not counted: cgroups.CommandsName); the
		// count is of /proc (no fork needed), where tent's init is one.
		if _, err := fmt.Sscan(lines[1], &n); err != nil || n > 16 || n < 3 {
			t.Errorf("%q processes of the container under a limit of 16 (tent's init is one of them in /proc)", lines[1])
		}
	})
}

// `ctr run -t`: the terminal's master goes to the shim over the console
// socket; the command runs on a terminal inside the sandbox. ctr needs a
// terminal of its own: script(1) gives it one.
func TestContainerdTTY(t *testing.T) {
	e := newEnv(t)
	need(t, lookPath("script"), "script (bsdutils) missing")
	ctr := fmt.Sprintf("ctr --address %s --namespace %s run -t --rm --runc-binary %s %s tty1 sh -c 'tty; echo exit-$((3+4)); exit 5'", e.sock, e.ns, e.runc, e.image)
	cmd := exec.Command("script", "-qec", ctr, "/dev/null")
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 5 {
		t.Errorf("ctr run -t: %v, want exit status 5", err)
	}
	if !strings.Contains(string(out), "/dev/pts/0") || !strings.Contains(string(out), "exit-7") {
		t.Errorf("ctr run -t: want a terminal (/dev/pts/0) and the output, got %q", out)
	}
}

// `ctr task exec -t` in a running container.
func TestContainerdExecTTY(t *testing.T) {
	e := newEnv(t)
	need(t, lookPath("script"), "script (bsdutils) missing")
	if out, errOut, code := e.ctr("run", "-d", "--runc-binary", e.runc, e.image, "bg", "sleep", "300"); code != 0 {
		t.Fatalf("ctr run -d: %d %s%s", code, out, errOut)
	}
	r := e.record(t, "bg")
	ctr := fmt.Sprintf("ctr --address %s --namespace %s task exec -t --exec-id t1 bg sh -c 'tty; echo in-$((2+2)); exit 4'", e.sock, e.ns)
	cmd := exec.Command("script", "-qec", ctr, "/dev/null")
	cmd.Stdin = strings.NewReader("")
	out, err := cmd.CombinedOutput()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 4 {
		t.Errorf("ctr task exec -t: %v, want exit status 4 (%q)", err, out)
	}
	if !strings.Contains(string(out), "/dev/pts/") || !strings.Contains(string(out), "in-4") {
		t.Errorf("ctr task exec -t: want a terminal and the output, got %q", out)
	}
	if out, errOut, code := e.ctr("task", "kill", "-s", "SIGKILL", "bg"); code != 0 {
		t.Fatalf("ctr task kill: %d %s%s", code, out, errOut)
	}
	Eventually(t, "the task to stop", func() bool {
		out, _, _ := e.ctr("task", "ls")
		return strings.Contains(out, "STOPPED")
	})
	if out, errOut, code := e.ctr("container", "rm", "bg"); code != 0 {
		// ctr container rm deletes a stopped task first.
		t.Errorf("ctr container rm: %d %s%s", code, out, errOut)
	}
	e.assertGone(t, "bg", r)
}

// A network namespace joined by path (as a pod's, made by CNI): the
// container sees that namespace's interfaces, and the namespace outlives
// the container.
func TestContainerdJoinNetns(t *testing.T) {
	e := newEnv(t)
	need(t, lookPath("ip"), "ip (iproute2) missing")
	name := e.ns // unique to this test run
	if out, err := exec.Command("ip", "netns", "add", name).CombinedOutput(); err != nil {
		t.Fatalf("ip netns add: %v %s", err, out)
	}
	t.Cleanup(func() { _ = exec.Command("ip", "netns", "del", name).Run() })
	for _, args := range [][]string{
		{"-n", name, "addr", "add", "10.251.7.1/32", "dev", "lo"},
		{"-n", name, "link", "set", "lo", "up"},
	} {
		if out, err := exec.Command("ip", args...).CombinedOutput(); err != nil {
			t.Fatalf("ip %v: %v %s", args, err, out)
		}
	}
	out, errOut, code := e.run("pod", []string{"--with-ns", "network:/run/netns/" + name}, "cat", "/proc/net/fib_trie")
	if code != 0 || !strings.Contains(out, "10.251.7.1") {
		t.Errorf("exit %d, stdout %q, stderr %q: want the pod namespace's 10.251.7.1", code, out, errOut)
	}
	if _, err := os.Stat("/run/netns/" + name); err != nil {
		t.Errorf("the joined namespace is gone: %v", err)
	}
	// Without --with-ns, the container's own namespace has loopback only.
	out, _, _ = e.run("nopod", nil, "cat", "/proc/net/fib_trie")
	if strings.Contains(out, "10.251.7.1") || !strings.Contains(out, "127.0.0.1") {
		t.Errorf("a container of its own network namespace sees %q", out)
	}
}

// BenchmarkCtrRun is `ctr run --rm IMAGE ID true` through containerd's
// runc shim, with tent-runc and with Debian's runc, side by side (make
// bench).
func BenchmarkCtrRun(b *testing.B) {
	e := newEnv(b)
	runc, err := exec.LookPath("runc")
	need(b, err == nil, "runc missing (apt-get install runc)")
	for _, rt := range []struct{ name, bin string }{{"tent", e.runc}, {"runc", runc}} {
		b.Run(rt.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				id := fmt.Sprintf("bench-%s-%d", rt.name, i)
				if out, errOut, code := e.ctr("run", "--rm", "--runc-binary", rt.bin, e.image, id, "true"); code != 0 {
					b.Fatalf("ctr run: %d %s%s", code, out, errOut)
				}
			}
		})
	}
}

// An image's users, as under runc: the container's root writes the
// image's root-owned directories, the image's user 101 its own and not
// root's, `ctr task exec --user` runs as another user of the image with
// the bundle's additional groups, and on the host every process of the
// container runs as an id of tent's range (oci.DefaultIDRange), never
// root. What each writes lands on disk under its own id.
func TestContainerdImageUsers(t *testing.T) {
	e := newEnv(t)
	out, errOut, code := e.run("users", nil, "sh", "-c", "id -u; stat -c %u:%g /etc /var/cache/app /var/cache/app/page; touch /etc/made 2>&1 && echo etc-ok; echo x >> /var/cache/app/page && echo page-ok")
	if want := "0\n0:0\n101:101\n101:101\netc-ok\npage-ok\n"; code != 0 || out != want {
		t.Errorf("as root: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	const id = "users-long"
	if out, errOut, code := e.ctr("run", "-d", "--runc-binary", e.runc, e.image, id, "sleep", "300"); code != 0 {
		t.Fatalf("ctr run -d: %d %s%s", code, out, errOut)
	}
	r := e.record(t, id)
	defer func() {
		e.ctr("task", "kill", "-s", "SIGKILL", id)
		Eventually(t, "the task to stop", func() bool {
			out, _, _ := e.ctr("task", "ls")
			return !strings.Contains(out, id) || strings.Contains(out, "STOPPED")
		})
		e.ctr("task", "rm", id)
		e.ctr("container", "rm", id)
		e.assertGone(t, id, r)
	}()
	out, errOut, code = e.ctr("task", "exec", "--exec-id", "u101", "--user", "101:101", id, "sh", "-c",
		"id -u; id -g; echo n > /var/cache/app/new && echo app-ok; touch /etc/by-101 2>&1; echo done")
	if want := "101\n101\napp-ok\ntouch: /etc/by-101: Permission denied\ndone\n"; code != 0 || out != want {
		t.Errorf("exec --user 101:101: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	// Root copies /etc up into the snapshot's upper layer, where the
	// range's root owns it on disk: that must not pass for a snapshot
	// already in the range's ids when the container starts again.
	if out, errOut, code := e.ctr("task", "exec", "--exec-id", "first", id, "touch", "/etc/first"); code != 0 {
		t.Fatalf("touch /etc/first: %d %s%s", code, out, errOut)
	}
	// The same container started again (its snapshot's upper directory
	// given to the range's root by the first start): root still owns
	// /etc, and what it made there is still there.
	if out, errOut, code := e.ctr("task", "kill", "-s", "SIGKILL", id); code != 0 {
		t.Fatalf("ctr task kill: %d %s%s", code, out, errOut)
	}
	Eventually(t, "the task to stop", func() bool {
		out, _, _ := e.ctr("task", "ls")
		return strings.Contains(out, "STOPPED")
	})
	if out, errOut, code := e.ctr("task", "rm", id); code != 0 {
		t.Fatalf("ctr task rm: %d %s%s", code, out, errOut)
	}
	if out, errOut, code := e.ctr("task", "start", "-d", id); code != 0 {
		t.Fatalf("ctr task start -d (again): %d %s%s", code, out, errOut)
	}
	r = e.record(t, id)
	// /bin/busybox and /etc/passwd are in the image's layer only (the
	// first run copied /etc itself up, as the range's root).
	out, errOut, code = e.ctr("task", "exec", "--exec-id", "again", id, "sh", "-c", "stat -c %u:%g /etc /var/cache/app /bin/busybox /etc/passwd; cat /var/cache/app/new; touch /etc/again && echo again-ok")
	if want := "0:0\n101:101\n0:0\n0:0\nn\nagain-ok\n"; code != 0 || out != want {
		t.Errorf("after a restart: exit %d, stdout %q, stderr %q; want %q", code, out, errOut, want)
	}
	// On the host: the container's process (sleep) is the range's
	// root. (ctr task ps lists tent's supervisor too, a host process.)
	host := oci.DefaultIDRange.Host
	seen := 0
	for _, pid := range pidsOf(e, id) {
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil || !strings.HasPrefix(string(status), "Name:\tsleep\n") {
			continue
		}
		seen++
		var uid uint32
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) > 1 && f[0] == "Uid:" {
				fmt.Sscan(f[1], &uid)
			}
		}
		if uid != host {
			t.Errorf("the container's sleep (pid %d) runs as host uid %d, want the range's root %d", pid, uid, host)
		}
	}
	if seen != 1 {
		t.Errorf("found %d sleep processes of the container on the host, want 1", seen)
	}
}
