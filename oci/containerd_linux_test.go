package oci_test

import (
	"archive/tar"
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
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
	bridge  string // CRI: the CNI bridge on the host, removed at the end
}

func lookPath(name string) bool { _, err := exec.LookPath(name); return err == nil }

func newEnv(t testing.TB) *env { return newEnvWith(t, false, "") }

// newEnvWith is newEnv; with cri, containerd's CRI plugin is on, with a
// "tent" runtime handler (tent-runc, its --root in the test's
// directory), a loopback-only CNI network and a pause image of the
// test's; ctr then works in CRI's namespace, k8s.io.
func newEnvWith(t testing.TB, cri bool, extra string) *env {
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
		// A bridge of the test's own (no gateway, no masquerading: the
		// pod reaches nothing beyond it), its addresses' records in dir.
		e.bridge = "tcri" + strconv.Itoa(os.Getpid()%100000)
		conf := fmt.Sprintf(`{"cniVersion":"1.0.0","name":"tent-test","plugins":[{"type":"bridge","bridge":%q,"isGateway":false,"ipMasq":false,
"ipam":{"type":"host-local","dataDir":%q,"ranges":[[{"subnet":"10.253.%d.0/24"}]]}},{"type":"loopback"}]}`, e.bridge, filepath.Join(dir, "ipam"), os.Getpid()%250)
		if err := os.WriteFile(filepath.Join(cni, "10-lo.conflist"), []byte(conf), 0o600); err != nil {
			t.Fatal(err)
		}
		cfg += fmt.Sprintf(`[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "docker.io/library/tent-pause:test"
  # net.ipv4.ip_unprivileged_port_start=0 in each pod's namespace
  enable_unprivileged_ports = true
  enable_selinux = false
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
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
`, cni, e.runc, filepath.Dir(e.runRoot))
		cfg += extra
	}
	if err := os.WriteFile(filepath.Join(dir, "config.toml"), []byte(cfg), 0o600); err != nil {
		t.Fatal(err)
	}
	logf, err := os.Create(filepath.Join(dir, "containerd.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("containerd", "--config", filepath.Join(dir, "config.toml"))
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
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
		if e.bridge != "" {
			_ = exec.Command("ip", "link", "del", e.bridge).Run()
		}
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
	})
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if _, _, code := e.ctr("version"); code == 0 {
			break
		}
		if time.Now().After(end) {
			t.Fatal("containerd did not come up in 30 s")
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

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}

// ctr runs ctr against this containerd, in the test's namespace.
func (e *env) ctr(args ...string) (stdout, stderr string, code int) {
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

// image is an OCI image in memory: its manifest's digest and every blob
// (the manifest's too) by digest.
type image struct {
	manifest string
	blobs    map[string][]byte
}

// newImage builds an image of one layer: busybox at /bin/busybox with
// its applets hard-linked, and the directories an image has; cmd is its
// config's Cmd.
func newImage(t testing.TB, busybox string, cmd []string) image {
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	add := func(h *tar.Header, data []byte) {
		h.ModTime = time.Unix(0, 0)
		if err := tw.WriteHeader(h); err != nil {
			t.Fatal(err)
		}
		if _, err := tw.Write(data); err != nil {
			t.Fatal(err)
		}
	}
	for _, d := range []string{"bin/", "dev/", "etc/", "proc/", "root/", "run/", "sys/", "tmp/", "var/", "home/"} {
		mode := int64(0o755)
		if d == "tmp/" {
			mode = 0o1777
		}
		add(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: mode}, nil)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "etc/passwd", Mode: 0o644, Size: 50}, []byte(fmt.Sprintf("%-49s\n", "root:x:0:0:root:/root:/bin/sh")))
	data, err := os.ReadFile(busybox)
	if err != nil {
		t.Fatal(err)
	}
	add(&tar.Header{Typeflag: tar.TypeReg, Name: "bin/busybox", Mode: 0o755, Size: int64(len(data))}, data)
	list, err := exec.Command(busybox, "--list").Output()
	if err != nil {
		t.Fatal(err)
	}
	for _, applet := range strings.Fields(string(list)) {
		if applet != "busybox" && !strings.ContainsAny(applet, "/[") {
			// Hard links, as busybox's own images have them.
			add(&tar.Header{Typeflag: tar.TypeLink, Name: "bin/" + applet, Linkname: "bin/busybox", Mode: 0o755}, nil)
		}
	}
	if err := tw.Close(); err != nil {
		t.Fatal(err)
	}
	img := image{blobs: map[string][]byte{}}
	blob := func(b []byte) (string, int) {
		sum := sha256.Sum256(b)
		d := "sha256:" + hex.EncodeToString(sum[:])
		img.blobs[d] = b
		return d, len(b)
	}
	js := func(v any) []byte {
		b, err := json.Marshal(v)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	layerDigest, layerSize := blob(layer.Bytes())
	cfgDigest, cfgSize := blob(js(map[string]any{
		"architecture": "amd64", "os": "linux",
		"config": map[string]any{"Env": []string{"PATH=/bin"}, "Cmd": cmd},
		"rootfs": map[string]any{"type": "layers", "diff_ids": []string{layerDigest}},
	}))
	img.manifest, _ = blob(js(map[string]any{
		"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
		"config": map[string]any{"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cfgDigest, "size": cfgSize},
		"layers": []any{map[string]any{"mediaType": "application/vnd.oci.image.layer.v1.tar", "digest": layerDigest, "size": layerSize}},
	}))
	return img
}

// buildImage writes an OCI image archive (oci-layout, index.json, blobs)
// of newImage, named name, for ctr image import.
func buildImage(t testing.TB, dir, busybox, name string, cmd []string) string {
	img := newImage(t, busybox, cmd)
	out := filepath.Join(dir, strings.NewReplacer("/", "_", ":", "_").Replace(name)+".tar")
	f, err := os.Create(out)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	ot := tar.NewWriter(f)
	put := func(name string, b []byte) {
		if err := ot.WriteHeader(&tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(b)), ModTime: time.Unix(0, 0)}); err != nil {
			t.Fatal(err)
		}
		if _, err := ot.Write(b); err != nil {
			t.Fatal(err)
		}
	}
	put("oci-layout", []byte(`{"imageLayoutVersion":"1.0.0"}`))
	for d, b := range img.blobs {
		put("blobs/sha256/"+strings.TrimPrefix(d, "sha256:"), b)
	}
	index, err := json.Marshal(map[string]any{
		"schemaVersion": 2,
		"manifests": []any{map[string]any{
			"mediaType": "application/vnd.oci.image.manifest.v1+json", "digest": img.manifest, "size": len(img.blobs[img.manifest]),
			"platform":    map[string]string{"architecture": "amd64", "os": "linux"},
			"annotations": map[string]string{"io.containerd.image.name": name, "org.opencontainers.image.ref.name": "test"},
		}},
	})
	if err != nil {
		t.Fatal(err)
	}
	put("index.json", index)
	if err := ot.Close(); err != nil {
		t.Fatal(err)
	}
	return out
}

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
	// linux.cgroupsPath (/NS/ID from ctr) holds the supervisor, whose
	// cgroup the shim reads metrics from, and the sandbox's cgroup.
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

// Eventually polls cond every 20 ms for up to 20 s.
func Eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(20 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
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
		// tent's init too, with its threads (pids.max counts tasks); the count
		// is of /proc (no fork needed).
		if _, err := fmt.Sscan(lines[1], &n); err != nil || n > 15 || n < 3 {
			t.Errorf("%q processes of the container under a limit of 16 (tent's init is one)", lines[1])
		}
	})
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
