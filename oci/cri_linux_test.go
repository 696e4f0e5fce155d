package oci_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// crictl runs crictl (TENT_CRICTL, or crictl on PATH) against e's CRI.
func (e *env) crictl(args ...string) (string, string, int) {
	bin := os.Getenv("TENT_CRICTL")
	if bin == "" {
		bin = "crictl"
	}
	args = append([]string{"--runtime-endpoint", "unix://" + e.sock, "--image-endpoint", "unix://" + e.sock, "--timeout", "60s"}, args...)
	cmd := exec.Command(bin, args...)
	if e.netnsPID != 0 {
		// Where containerd's streaming server is (exec, attach).
		cmd = exec.Command("nsenter", append([]string{"--net=/proc/" + strconv.Itoa(e.netnsPID) + "/ns/net", "--", bin}, args...)...)
	}
	var o, s bytes.Buffer
	cmd.Stdout, cmd.Stderr = &o, &s
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	switch {
	case errors.As(err, &ee):
		code = ee.ExitCode()
	case err != nil:
		code = -1
		s.WriteString(err.Error())
	}
	return strings.TrimSpace(o.String()), s.String(), code
}

// runPod starts a pod of config cfg on the tent handler, removed at the
// test's end (unless the test removed it); it returns the pod's id and
// its config's file, which crictl create wants too.
func (e *env) runPod(t *testing.T, cfg map[string]any) (id, file string) {
	t.Helper()
	name := cfg["metadata"].(map[string]any)["name"].(string)
	file = writeJSON(t, filepath.Join(e.dir, "pod-"+name+".json"), cfg)
	id, errOut, code := e.crictl("runp", "--runtime", "tent", file)
	if code != 0 {
		t.Fatalf("crictl runp %s: %d %s", name, code, errOut)
	}
	t.Cleanup(func() {
		if _, errOut, code := e.crictl("rmp", "-f", id); code != 0 && !strings.Contains(errOut, "not found") {
			t.Errorf("crictl rmp %s: %d %s", name, code, errOut)
		}
	})
	return id, file
}

// startContainer creates and starts a container of config cfg in the pod
// podID (of config file podFile) and returns its id.
func (e *env) startContainer(t *testing.T, podID, podFile string, cfg map[string]any) string {
	t.Helper()
	name := cfg["metadata"].(map[string]any)["name"].(string)
	file := writeJSON(t, filepath.Join(e.dir, name+".json"), cfg)
	id, errOut, code := e.crictl("create", podID, file, podFile)
	if code != 0 {
		t.Fatalf("crictl create %s: %d %s", name, code, errOut)
	}
	if _, errOut, code := e.crictl("start", id); code != 0 {
		t.Fatalf("crictl start %s: %d %s", name, code, errOut)
	}
	return id
}

func writeJSON(t testing.TB, path string, v any) string {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// The CRI path that kubelet uses: a pod on the "tent" runtime handler,
// two containers in it sharing the pod's network namespace, exec, logs,
// stop, removal. Needs crictl (sigs.k8s.io/cri-tools, TENT_CRICTL).
func TestCRI(t *testing.T) {
	e := newCRIEnv(t, "")
	dir := e.dir
	podID, pod := e.runPod(t, map[string]any{
		"metadata":      map[string]any{"name": "tentpod", "namespace": "default", "uid": "tentpod-uid", "attempt": 0},
		"log_directory": filepath.Join(dir, "logs"),
		"hostname":      "tentpod-host",
		// A pod's IPC sysctl: each container of the pod gets it.
		"linux": map[string]any{"sysctls": map[string]string{"kernel.shm_rmid_forced": "1"}},
	})
	ctrs := map[string]string{}
	for _, c := range []struct{ name, cmd string }{
		{"server", "echo started; ip=$(cat /proc/net/fib_trie | wc -l); echo fib=$ip; exec sleep 300"},
		{"client", "echo client; exec sleep 300"},
	} {
		ctrs[c.name] = e.startContainer(t, podID, pod, map[string]any{
			"metadata": map[string]any{"name": c.name},
			"image":    map[string]any{"image": e.image},
			"command":  []string{"sh", "-c", c.cmd},
			"log_path": c.name + ".log",
			// As kubelet asks without shareProcessNamespace: the
			// container's own pid namespace (CRI's default is the pod's).
			"linux": map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"pid": 1}}},
		})
	}
	out, errOut, _ := e.crictl("exec", ctrs["server"], "sh", "-c", "echo in-$((6*7)); exit 3")
	if out != "in-42" || !strings.Contains(errOut, "command terminated with exit code 3") {
		t.Errorf("crictl exec: %q %q, want in-42 and exit code 3", out, errOut)
	}
	// Each container has the pod's hostname (in a uts namespace of its
	// own).
	if out, errOut, _ := e.crictl("exec", ctrs["client"], "hostname"); out != "tentpod-host" {
		t.Errorf("hostname in the pod's second container: %q %s, want tentpod-host", out, errOut)
	}
	// The pod's containers share its IPC namespace (CRI's default), the
	// pod's sandbox container's, where its IPC sysctls are set.
	ipcNS := map[string]string{}
	for name, id := range ctrs {
		if out, errOut, _ := e.crictl("exec", id, "cat", "/proc/sys/kernel/shm_rmid_forced"); out != "1" {
			t.Errorf("the pod's kernel.shm_rmid_forced in its %s container: %q %s, want 1", name, out, errOut)
		}
		ipcNS[name], _, _ = e.crictl("exec", id, "readlink", "/proc/self/ns/ipc")
	}
	if hostIPC, _ := os.Readlink("/proc/self/ns/ipc"); ipcNS["server"] == "" || ipcNS["server"] != ipcNS["client"] || ipcNS["server"] == hostIPC {
		t.Errorf("the pod's containers' IPC namespaces: %v (the host's %s); want one, the pod's", ipcNS, hostIPC)
	}
	// /sys is a read-only sysfs of the pod's network namespace: its
	// devices (lo, eth0), none of the host's (the test's bridge, say);
	// read-only (EROFS); tent's masks over it (the bundle here has none:
	// crictl, unlike kubelet, asks for no masked paths).
	hostDevs, err := os.ReadDir("/sys/class/net")
	if err != nil {
		t.Fatal(err)
	}
	if out, errOut, _ := e.crictl("exec", ctrs["client"], "ls", "/sys/class/net"); strings.Fields(out) == nil || strings.Join(strings.Fields(out), " ") != "eth0 lo" {
		t.Errorf("/sys/class/net in the pod: %q %s, want eth0 lo", out, errOut)
	} else {
		for _, d := range hostDevs {
			if d.Name() != "lo" && d.Name() != "eth0" && strings.Contains(out, d.Name()) {
				t.Errorf("/sys/class/net in the pod shows the host's %s", d.Name())
			}
		}
	}
	if out, errOut, _ := e.crictl("exec", ctrs["client"], "sh", "-c", "echo 1 > /sys/kernel/mm/ksm/run; touch /sys/x"); !strings.Contains(out+errOut, "Read-only file system") {
		t.Errorf("writing /sys in the pod: %q %s, want EROFS", out, errOut)
	}
	if out, errOut, _ := e.crictl("exec", ctrs["client"], "sh", "-c", "ls -A /sys/firmware | wc -l; cat /sys/fs/cgroup/memory/memory.limit_in_bytes /sys/fs/cgroup/memory.max 2>/dev/null | head -1"); !strings.HasPrefix(out, "0\n") || len(strings.Fields(out)) != 2 {
		t.Errorf("/sys/firmware (masked) and the cgroup view under /sys: %q %s, want 0 entries and a memory limit", out, errOut)
	}
	// Both containers are in the pod's network namespace: the server
	// listens on its loopback, the client connects to it. Port 80: the
	// pod's sysctl net.ipv4.ip_unprivileged_port_start=0 (containerd's
	// enable_unprivileged_ports) was set in the pod's namespace, so a
	// container without capabilities may bind it.
	if _, errOut, code := e.crictl("exec", ctrs["server"], "sh", "-c", "nc -l -p 80 -e echo hello-pod >/dev/null 2>&1 &"); code != 0 {
		t.Errorf("crictl exec nc -l: %d %s", code, errOut)
	}
	var got string
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Millisecond) {
		got, _, _ = e.crictl("exec", ctrs["client"], "sh", "-c", "nc 127.0.0.1 80 </dev/null")
		if got == "hello-pod" {
			break
		}
	}
	if got != "hello-pod" {
		t.Errorf("the client did not reach the server over the pod's loopback: %q", got)
	}
	// A container killed by the kernel's OOM killer at its memory limit
	// is reported OOMKilled: the shim watches the cgroup of the pid it
	// reaps, the sandbox's init, which is in the container's cgroup.
	oomID := e.startContainer(t, podID, pod, map[string]any{
		"metadata": map[string]any{"name": "oom"},
		"image":    map[string]any{"image": e.image},
		"command":  []string{"sh", "-c", `x=$(head -c 268435456 /dev/zero | tr '\0' a); echo survived`},
		"log_path": "oom.log",
		"linux": map[string]any{"resources": map[string]any{"memory_limit_in_bytes": 32 << 20},
			"security_context": map[string]any{"namespace_options": map[string]any{"pid": 1}}},
	})
	var oomState string
	Eventually(t, "the oom container to exit", func() bool {
		oomState, _, _ = e.crictl("inspect", "-o", "go-template", "--template", "{{.status.state}} {{.status.reason}} {{.status.exitCode}}", oomID)
		return strings.HasPrefix(oomState, "CONTAINER_EXITED")
	})
	if oomState != "CONTAINER_EXITED OOMKilled 137" {
		t.Errorf("the container past its memory limit: %q, want CONTAINER_EXITED OOMKilled 137", oomState)
	}
	logs, errOut, code := e.crictl("logs", ctrs["server"])
	if code != 0 || !strings.Contains(logs, "started") {
		t.Errorf("crictl logs: %d %q %s", code, logs, errOut)
	}
	for _, id := range ctrs {
		if _, errOut, code := e.crictl("stop", "-t", "5", id); code != 0 {
			t.Errorf("crictl stop: %d %s", code, errOut)
		}
	}
	if _, errOut, code := e.crictl("stopp", podID); code != 0 {
		t.Errorf("crictl stopp: %d %s", code, errOut)
	}
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

// BenchmarkCRIPodStart is a pod's start through containerd's CRI, as
// kubelet drives it: `crictl runp` + `create` + `start` of a pod of one
// container (start), then `crictl exec true` in it (exec), with the tent
// handler and with containerd's default runc, side by side (make bench).
// Each iteration removes its pod. runc must be one that creates CRI pods
// on this kernel (make k8s-tools builds runc 1.5; Debian's 1.1 cannot):
// where it cannot, only tent's figures are given.
func BenchmarkCRIPodStart(b *testing.B) {
	e := newCRIEnv(b, "")
	ctr := writeJSON(b, filepath.Join(e.dir, "ctr.json"), map[string]any{
		"metadata": map[string]any{"name": "bench"},
		"image":    map[string]any{"image": e.image},
		"command":  []string{"sleep", "300"},
		"linux":    map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"pid": 1}}},
	})
	for _, handler := range []string{"tent", "runc"} {
		b.Run(handler, func(b *testing.B) {
			var start, exec time.Duration
			for i := 0; b.Loop(); i++ {
				pod := writeJSON(b, filepath.Join(e.dir, "pod.json"), map[string]any{
					"metadata":      map[string]any{"name": "bench", "namespace": "default", "uid": fmt.Sprintf("%s-%d", handler, i), "attempt": 0},
					"log_directory": filepath.Join(e.dir, "logs"),
				})
				t0 := time.Now()
				podID, errOut, code := e.crictl("runp", "--runtime", handler, pod)
				if code != 0 {
					if handler == "runc" {
						b.Skipf("runc cannot create a CRI pod here (make k8s-tools builds one that can): %s", errOut)
					}
					b.Fatalf("crictl runp: %d %s", code, errOut)
				}
				id, errOut, code := e.crictl("create", podID, ctr, pod)
				if code == 0 {
					_, errOut, code = e.crictl("start", id)
				}
				if code != 0 {
					b.Fatalf("crictl create/start: %d %s", code, errOut)
				}
				t1 := time.Now()
				if _, errOut, code := e.crictl("exec", id, "true"); code != 0 {
					b.Fatalf("crictl exec: %d %s", code, errOut)
				}
				t2 := time.Now()
				start, exec = start+t1.Sub(t0), exec+t2.Sub(t1)
				b.StopTimer()
				if _, errOut, code := e.crictl("rmp", "-f", podID); code != 0 {
					b.Fatalf("crictl rmp: %d %s", code, errOut)
				}
				b.StartTimer()
			}
			b.ReportMetric(float64(start.Milliseconds())/float64(b.N), "start-ms/op")
			b.ReportMetric(float64(exec.Milliseconds())/float64(b.N), "exec-ms/op")
		})
	}
}

// A pod with shareProcessNamespace: its containers' inits are cloned into
// the pod's pid namespace (its sandbox container's), so each sees and
// may signal the others' processes, and none sees the host's. When a
// container ends, what it left running there is killed (its init is
// not the namespace's PID 1, which would take it along).
func TestCRISharedPID(t *testing.T) {
	e := newCRIEnv(t, "")
	dir := e.dir
	shared := map[string]any{"security_context": map[string]any{"namespace_options": map[string]any{"pid": 0}}} // POD
	podID, pod := e.runPod(t, map[string]any{
		"metadata":      map[string]any{"name": "sharedpid", "namespace": "default", "uid": "sharedpid-uid", "attempt": 0},
		"log_directory": filepath.Join(dir, "logs"),
		"linux":         shared,
	})
	ctrs := map[string]string{}
	for _, c := range []struct{ name, cmd string }{
		{"server", "exec sleep 301"},
		{"sidecar", "setsid sleep 302 & exec sleep 303"},
	} {
		ctrs[c.name] = e.startContainer(t, podID, pod, map[string]any{
			"metadata": map[string]any{"name": c.name},
			"image":    map[string]any{"image": e.image},
			"command":  []string{"sh", "-c", c.cmd},
			"log_path": c.name + ".log",
			"linux":    shared,
		})
	}
	// ps lists every process of the pod's namespace: the pod's sandbox
	// container's, and both containers'.
	ps := func(name string) string {
		out, errOut, code := e.crictl("exec", "-s", ctrs[name], "sh", "-c", `for p in /proc/[0-9]*; do echo "${p#/proc/} $(tr '\0' ' ' < $p/cmdline)"; done`)
		if code != 0 {
			t.Fatalf("listing /proc in %s: %d %s", name, code, errOut)
		}
		return out
	}
	listing := ps("sidecar")
	for _, want := range []string{"sleep 301", "sleep 302", "sleep 303", "sleep 2147483647"} {
		if !strings.Contains(listing, want) {
			t.Errorf("the sidecar's /proc has no %q (shareProcessNamespace):\n%s", want, listing)
		}
	}
	// Nothing of the host's: no containerd, no tent supervisor, no shim.
	for _, host := range []string{"containerd", "tent-supervisor", "tent-procfs"} {
		if strings.Contains(listing, host) {
			t.Errorf("the pod's /proc shows the host's %s:\n%s", host, listing)
		}
	}
	// A container's own process is not PID 1 (the pod's sandbox's init is).
	if out, errOut, _ := e.crictl("exec", "-s", ctrs["server"], "sh", "-c", "echo $$; cat /proc/1/cmdline | tr '\\0' ' '"); strings.HasPrefix(out, "1\n") || !strings.Contains(out, "tent-init") {
		t.Errorf("the server's shell pid and /proc/1: %q %s, want a pid other than 1 and the pod's init at 1", out, errOut)
	}
	// But it cannot signal them: each container's commands are in a
	// Landlock domain of their own, whose signal scope keeps them from
	// signalling any process outside it (stricter than runc, where a
	// sidecar may; here the scope is what keeps a container's commands
	// from stopping their own init, which is not PID 1 of this namespace).
	if out, errOut, code := e.crictl("exec", "-s", ctrs["sidecar"], "sh", "-c", `for p in /proc/[0-9]*; do if [ "$(tr '\0' ' ' < $p/cmdline)" = "sleep 301 " ]; then kill -TERM ${p#/proc/}; exit; fi; done; exit 9`); code != 1 || !strings.Contains(out+errOut, "Operation not permitted") {
		t.Errorf("kill of the server's sleep from the sidecar: %d %q %s, want EPERM", code, out, errOut)
	}
	// Nor read their environment (Landlock's ptrace rule: no process
	// outside the domain), which under runc a container of the same uid
	// may.
	if out, errOut, code := e.crictl("exec", "-s", ctrs["sidecar"], "sh", "-c", `for p in /proc/[0-9]*; do if [ "$(tr '\0' ' ' < $p/cmdline)" = "sleep 301 " ]; then cat $p/environ; exit; fi; done; exit 9`); code != 1 || !strings.Contains(out+errOut, "Permission denied") {
		t.Errorf("reading the server's environ from the sidecar: %d %q %s, want EACCES", code, out, errOut)
	}
	// Nor their own init.
	if out, errOut, code := e.crictl("exec", "-s", ctrs["sidecar"], "sh", "-c", "kill -STOP $PPID"); code != 1 || !strings.Contains(out+errOut, "Operation not permitted") {
		t.Errorf("kill -STOP of the sidecar's init from its command: %d %q %s, want EPERM", code, out, errOut)
	}
	if state, _, _ := e.crictl("inspect", "-o", "go-template", "--template", "{{.status.state}}", ctrs["server"]); state != "CONTAINER_RUNNING" {
		t.Errorf("the server after the sidecar's refused SIGTERM: %q, want CONTAINER_RUNNING", state)
	}
	// The pod's procfs keeps tent's protections.
	if _, errOut, code := e.crictl("exec", "-s", ctrs["sidecar"], "sh", "-c", "echo h > /proc/sysrq-trigger"); code == 0 {
		t.Errorf("/proc/sysrq-trigger was writable in the shared pid namespace's procfs (%s)", errOut)
	}
	// The sidecar's end takes its background sleep along.
	if _, errOut, code := e.crictl("stop", "-t", "5", ctrs["sidecar"]); code != 0 {
		t.Fatalf("crictl stop sidecar: %d %s", code, errOut)
	}
	ctrs["third"] = e.startContainer(t, podID, pod, map[string]any{
		"metadata": map[string]any{"name": "third"},
		"image":    map[string]any{"image": e.image},
		"command":  []string{"sleep", "304"},
		"log_path": "third.log",
		"linux":    shared,
	})
	Eventually(t, "the sidecar's background sleep to go", func() bool { return !strings.Contains(ps("third"), "sleep 302") })
	if _, errOut, code := e.crictl("stopp", podID); code != 0 {
		t.Errorf("crictl stopp: %d %s", code, errOut)
	}
}
