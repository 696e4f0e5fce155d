package oci_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// These tests run containers through containerd's stock runc shim with
// tent-runc as its runtime binary: a containerd of the test's own (root,
// state and socket in a temporary directory), an image built here (a
// static busybox; no registry is reachable) and ctr. They need root,
// containerd and ctr (Debian's containerd), busybox-static, and
// TENT_BINARY: a static tent (make build; the rlimit trampoline runs the
// binary inside the image, which has no ld.so). They skip without
// them, unless TENT_REQUIRE_OCI is set (make test-oci), then fail.

// need skips (or fails under TENT_REQUIRE_OCI) with why.
func need(t testing.TB, ok bool, why string) {
	t.Helper()
	if ok {
		return
	}
	if os.Getenv("TENT_REQUIRE_OCI") != "" {
		t.Fatalf("TENT_REQUIRE_OCI is set, but %s", why)
	}
	t.Skip(why)
}

// env is one containerd and the paths a test needs.
type env struct {
	t       testing.TB
	dir     string
	sock    string
	ns      string
	runc    string // the tent-runc symlink
	runRoot string // tent-runc's --root, as the shim passes it
	image   string
	// netnsPID is containerd's pid when it runs in a network namespace of
	// its own (newCRIEnv), else 0: its CNI bridge, portmap rules and
	// streaming server are there, and crictl is run there.
	netnsPID int
}

// containerdMajor is the major version in `containerd --version`'s line
// ("containerd github.com/containerd/containerd/v2 2.1.9+unknown …",
// "containerd containerd.io 1.6.20 …"), or "".
func containerdMajor(line string) string {
	f := strings.Fields(line)
	if len(f) < 3 {
		return ""
	}
	v := strings.TrimPrefix(f[2], "v")
	major, _, ok := strings.Cut(v, ".")
	if !ok {
		return ""
	}
	return major
}

// subnet is the pods' addresses, x.y.z.0/24; gateway is its .1, the
// bridge's in containerd's own network namespace (newCRIEnv).
func (e *env) subnet() string  { return fmt.Sprintf("10.253.%d.0/24", os.Getpid()%250) }
func (e *env) gateway() string { return fmt.Sprintf("10.253.%d.1", os.Getpid()%250) }

// cniBin is where the CNI plugins are: TENT_CNI_BIN (make test-cri sets
// it to bin/k8s/cni where make k8s-tools built them, pinned), else
// Debian's /usr/lib/cni.
func cniBin() string {
	if d := os.Getenv("TENT_CNI_BIN"); d != "" {
		return d
	}
	return "/usr/lib/cni"
}

func lookPath(name string) bool { _, err := exec.LookPath(name); return err == nil }

func newEnv(t testing.TB) *env { return newEnvIn(t, false, "") }

// newCRIEnv is newEnv with containerd's CRI plugin on: a "tent" runtime
// handler (tent-runc, its --root in the test's directory), a CNI network
// and a pause image of the test's, extra appended to containerd's
// config; ctr then works in CRI's namespace, k8s.io. containerd runs in
// a network namespace the test makes (`unshare --net`, loopback up):
// CNI's bridge (a gateway there) and portmap's hostPort rules are made
// in it, never in the machine's own, and go with it when containerd
// ends; crictl runs there too (see env.crictl).
func newCRIEnv(t testing.TB, extra string) *env {
	t.Helper()
	bin := os.Getenv("TENT_CRICTL")
	if bin == "" {
		bin, _ = exec.LookPath("crictl")
	}
	need(t, bin != "", "no crictl (make test-cri builds it; TENT_CRICTL)")
	cni := cniBin()
	need(t, lookPath("ip") && fileExists(cni+"/bridge") && fileExists(cni+"/portmap"), "ip or the CNI plugins missing in "+cni+" (apt-get install iproute2 containernetworking-plugins)")
	need(t, lookPath("unshare") && lookPath("nsenter") && lookPath("iptables"), "unshare, nsenter or iptables missing")
	return newEnvIn(t, true, extra)
}

// inNetns runs fn on a thread that joined the network namespace of pid
// (sockets fn makes are there); the thread is not given back to the
// runtime, so it ends with fn's goroutine.
func inNetns(pid int, fn func() error) error {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread is in another namespace
		fd, err := unix.Open(fmt.Sprintf("/proc/%d/ns/net", pid), unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			done <- err
			return
		}
		defer unix.Close(fd)
		if err := unix.Setns(fd, unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("setns: %w", err)
			return
		}
		done <- fn()
	}()
	return <-done
}

func newEnvIn(t testing.TB, cri bool, extra string) *env {
	need(t, os.Geteuid() == 0, "containerd tests need root")
	need(t, lookPath("containerd") && lookPath("ctr") && lookPath("containerd-shim-runc-v2"), "containerd, ctr or containerd-shim-runc-v2 missing (apt-get install containerd)")
	tent := os.Getenv("TENT_BINARY")
	need(t, tent != "", "TENT_BINARY (a static tent, make build) is not set")
	bb, err := exec.LookPath("busybox")
	need(t, err == nil, "busybox missing (apt-get install busybox-static)")
	if out, _ := exec.Command("file", "-L", bb).Output(); !bytes.Contains(out, []byte("statically linked")) && !bytes.Contains(out, []byte("static-pie")) {
		need(t, false, bb+" is not static (apt-get install busybox-static)")
	}

	// A short directory: unix socket paths are at most 107 bytes.
	dir, err := os.MkdirTemp("", "tent-oci-")
	if err != nil {
		t.Fatal(err)
	}
	e := &env{t: t, dir: dir, sock: filepath.Join(dir, "c.sock"), ns: "tent-test-" + filepath.Base(dir)[len("tent-oci-"):], image: "docker.io/library/tent-busybox:test"}
	e.runRoot = "/run/containerd/runc/" + e.ns
	tentAbs, err := filepath.Abs(tent)
	if err != nil {
		t.Fatal(err)
	}
	e.runc = filepath.Join(dir, "tent-runc")
	if err := os.Symlink(tentAbs, e.runc); err != nil {
		t.Fatal(err)
	}
	cfg := e.config(cri, extra)
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	if cri {
		// In a network namespace of its own (newCRIEnv). The streaming
		// server (crictl exec, port-forward) listens on 127.0.0.1 there:
		// loopback up before containerd starts.
		cmd = exec.Command("unshare", "--net", "sh", "-c", `ip link set lo up && exec "$@"`, "sh", "containerd", "--config", filepath.Join(dir, "config.toml"))
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	if cri {
		e.netnsPID = cmd.Process.Pid
	}
	t.Cleanup(func() { e.stop(cmd, logf, cri) })
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, _, code := e.ctr("version"); code == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("containerd did not come up in 30 s")
		}
	}
	if major := os.Getenv("TENT_CONTAINERD_MAJOR"); major != "" {
		// CI asks for containerd 2 (make containerd2): a PATH that fell
		// back on the system's 1.6 must fail, not pass on the wrong one.
		out, err := exec.Command("containerd", "--version").Output()
		if err != nil {
			t.Fatalf("containerd --version: %v", err)
		}
		if v := containerdMajor(string(out)); v != major {
			t.Fatalf("TENT_CONTAINERD_MAJOR=%s, but containerd is major %q: %s", major, v, out)
		}
	}
	images := map[string][]string{e.image: {"sh"}}
	if cri {
		images["docker.io/library/tent-pause:test"] = []string{"sleep", "2147483647"}
	}
	for name, cmd := range images {
		tarball := buildImage(t, dir, bb, name, cmd)
		if out, errOut, code := e.ctr("image", "import", "--all-platforms", tarball); code != 0 {
			t.Fatalf("ctr image import: %d\n%s%s", code, out, errOut)
		}
	}
	return e
}

// config is containerd's config.toml for e; with cri, the CRI plugin
// with a "tent" runtime handler and a CNI network of the test's (whose
// file it writes), extra appended, and e's namespace, tent-runc root and
// bridge set for it.
func (e *env) config(cri bool, extra string) string {
	t, dir := e.t, e.dir
	cfg := fmt.Sprintf(`version = 2
root = %q
state = %q
[grpc]
  address = %q
[ttrpc]
  address = %q
`, filepath.Join(dir, "root"), filepath.Join(dir, "state"), e.sock, e.sock+".ttrpc")
	if !cri {
		cfg += "disabled_plugins = [\"io.containerd.grpc.v1.cri\"]\n"
	} else {
		e.ns = "k8s.io"
		e.runRoot = filepath.Join(dir, "runc-root", "k8s.io")
		cni := filepath.Join(dir, "cni")
		if err := os.Mkdir(cni, 0o700); err != nil {
			t.Fatal(err)
		}
		// A bridge of the test's own in containerd's network namespace,
		// the pods' gateway there (the test reaches host ports through
		// it), no masquerading (the pods reach nothing beyond it); its
		// addresses' records in dir; portmap's rules for hostPort there.
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"tent-test","plugins":[{"type":"bridge","bridge":"tcri0","isGateway":true,"ipMasq":false,
"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"%s"}]]}},{"type":"loopback"},{"type":"portmap","capabilities":{"portMappings":true}}]}`, filepath.Join(dir, "ipam"), e.subnet())
		if err := os.WriteFile(filepath.Join(cni, "10-lo.conflist"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/tent-pause:test"
  # net.ipv4.ip_unprivileged_port_start=0 in each pod's namespace
  enable_unprivileged_ports = true
  enable_selinux = false
  # No oom_score_adj below containerd's own: root here may lack
  # CAP_SYS_RESOURCE, without which runc creates no pod (tent-runc
  # ignores process.oomScoreAdj).
  restrict_oom_score_adj = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = %q
    conf_dir = %q
  [plugins."io.containerd.grpc.v1.cri".containerd]
    default_runtime_name = "runc"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
      runtime_type = "io.containerd.runc.v2"
    [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.tent]
      runtime_type = "io.containerd.runc.v2"
      [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.tent.options]
        BinaryName = %q
        Root = %q
`, cniBin(), cni, e.runc, filepath.Dir(e.runRoot))
		cfg += extra
	}
	return cfg
}

// stop ends e's containerd (cmd, which logs to logf) and everything the
// test left: pods (cri), tent-runc state (an error), shims,
// mounts, cgroups and the test's directory.
func (e *env) stop(cmd *exec.Cmd, logf *os.File, cri bool) {
	t, dir := e.t, e.dir
	if cri {
		// The pods a failed test left: stopped and removed through
		// CRI, as kubelet would.
		if _, errOut, code := e.crictl("rmp", "-a", "-f"); code != 0 {
			t.Errorf("crictl rmp -a -f: %d %s", code, errOut)
		}
	}
	// Every container of the test was removed: nothing of tent-runc's
	// state is left (the shim's --root for this namespace).
	if entries, err := os.ReadDir(e.runRoot); err == nil && len(entries) > 0 {
		var names []string
		for _, en := range entries {
			names = append(names, en.Name())
			// Then end them, whatever the test did.
			_ = exec.Command(e.runc, "--root", e.runRoot, "delete", "--force", en.Name()).Run()
		}
		t.Errorf("tent-runc state left in %s: %v", e.runRoot, names)
	}
	_ = os.Remove(e.runRoot)
	_ = cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		_ = cmd.Process.Kill()
		<-done
	}
	logf.Close()
	if t.Failed() || os.Getenv("TENT_OCI_LOG") != "" {
		if data, err := os.ReadFile(filepath.Join(dir, "containerd.log")); err == nil && len(data) > 0 {
			t.Logf("containerd's log (last 6000 bytes):\n%s", tail(data, 6000))
		}
	}
	// Shims of this containerd still running (a container left
	// behind) are ended, and every mount beneath dir (snapshots, pod
	// shm) is detached before dir goes.
	killShims(t, e.sock)
	unmountBeneath(dir)
	// The namespace's cgroup directories (runc leaves /NS) if empty.
	if !cri {
		paths, _ := filepath.Glob("/sys/fs/cgroup/*/" + e.ns)
		for _, p := range paths {
			_ = syscall.Rmdir(p)
		}
	}
	_ = os.RemoveAll(dir)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// ctr runs ctr against this containerd, in the test's namespace.
func (e *env) ctr(args ...string) (stdout, stderr string, code int) {
	// ctr's IO FIFOs in the test's directory (ctr leaves those of a
	// detached exec behind).
	switch {
	case len(args) > 0 && args[0] == "run":
		args = append([]string{"run", "--fifo-dir", filepath.Join(e.dir, "fifo")}, args[1:]...)
	case len(args) > 1 && args[0] == "task" && args[1] == "exec":
		args = append([]string{"task", "exec", "--fifo-dir", filepath.Join(e.dir, "fifo")}, args[2:]...)
	}
	cmd := exec.Command("ctr", append([]string{"--address", e.sock, "--namespace", e.ns}, args...)...)
	var o, s bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &s
	err := cmd.Run()
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		code = -1
		s.WriteString(err.Error())
	}
	return o.String(), s.String(), code
}

// run is `ctr run --rm` of cmd in the image with tent-runc; extra are
// ctr flags.
func (e *env) run(id string, extra []string, cmd ...string) (string, string, int) {
	args := append([]string{"run", "--rm", "--runc-binary", e.runc}, extra...)
	args = append(append(args, e.image, id), cmd...)
	return e.ctr(args...)
}

// record is the part of tent-runc's state.json the tests read.
type record struct {
	Pid         int      `json:"pid"`
	InitPID     int      `json:"init_pid"`
	Cgroups     []string `json:"cgroups"`
	CgroupsPath []string `json:"cgroups_path"`
}

func (e *env) record(t *testing.T, id string) record {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(e.runRoot, id, "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r
}

// assertGone checks that nothing of a container is left: its
// supervisor and init, its cgroups, its state directory.
func (e *env) assertGone(t *testing.T, id string, r record) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for _, pid := range []int{r.Pid, r.InitPID} {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(20 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("%s: process %d outlived the container", id, pid)
		}
	}
	for _, c := range append(r.Cgroups, r.CgroupsPath...) {
		if _, err := os.Stat(c); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s: cgroup %s left behind (%v)", id, c, err)
		}
	}
	if _, err := os.Stat(filepath.Join(e.runRoot, id)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s: state directory left behind (%v)", id, err)
	}
}

// alive reports whether pid runs (a zombie does not count).
func alive(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i > 0 && i+2 < len(data) && data[i+2] != 'Z'
}

// Eventually polls cond every 20 ms for up to 20 s.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// writeRootfs makes a root filesystem at dir: busybox and the
// directories an image has.
func writeRootfs(t *testing.T, dir string) {
	t.Helper()
	bb, err := exec.LookPath("busybox")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []string{"bin", "dev", "etc", "proc", "root", "run", "sys", "tmp"} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(filepath.Join(dir, "tmp"), 0o1777); err != nil {
		t.Fatal(err)
	}
	data, err := os.ReadFile(bb)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "bin", "busybox"), data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, a := range []string{"sh", "sleep", "ps", "wc", "head", "echo"} {
		if err := os.Symlink("busybox", filepath.Join(dir, "bin", a)); err != nil {
			t.Fatal(err)
		}
	}
}

// pidsOf lists the host pids of a container's processes (ctr task ps).
func pidsOf(e *env, id string) []int {
	out, _, _ := e.ctr("task", "ps", id)
	var pids []int
	for _, line := range strings.Split(out, "\n")[1:] {
		var pid int
		if _, err := fmt.Sscan(line, &pid); err == nil {
			pids = append(pids, pid)
		}
	}
	return pids
}

// killShims SIGKILLs the containerd shims serving the containerd at sock
// (found by their -address argument); it reports each one it had to end.
func killShims(t testing.TB, sock string) {
	procs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range procs {
		data, err := os.ReadFile(p)
		if err != nil || !bytes.Contains(data, []byte("containerd-shim")) {
			continue
		}
		args := strings.Split(string(data), "\x00")
		for i, a := range args {
			if a == "-address" && i+1 < len(args) && args[i+1] == sock {
				var pid int
				if _, err := fmt.Sscanf(p, "/proc/%d/cmdline", &pid); err == nil {
					t.Errorf("a shim (pid %d) outlived its containerd", pid)
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
	}
}

// unmountBeneath detaches every mount beneath dir, deepest first.
func unmountBeneath(dir string) {
	data, err := os.ReadFile("/proc/self/mountinfo")
	if err != nil {
		return
	}
	var points []string
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		if len(f) > 4 && strings.HasPrefix(f[4], dir+"/") {
			points = append(points, f[4])
		}
	}
	sort.Slice(points, func(i, j int) bool { return len(points[i]) > len(points[j]) })
	for _, p := range points {
		_ = syscall.Unmount(p, syscall.MNT_DETACH)
	}
}

func TestContainerdMajor(t *testing.T) {
	for line, want := range map[string]string{
		"containerd github.com/containerd/containerd/v2 2.1.9+unknown \n":        "2",
		"containerd github.com/containerd/containerd/v2 v2.4.2 6a8b5c1f\n":       "2",
		"containerd github.com/containerd/containerd 1.6.20~ds1 1.6.20~ds1-1+b1": "1",
		"containerd": "",
		"a b nodots": "",
	} {
		if got := containerdMajor(line); got != want {
			t.Errorf("containerdMajor(%q) = %q, want %q", line, got, want)
		}
	}
}
