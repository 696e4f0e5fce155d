package oci_test

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestPodIPCNamespace: a container whose bundle names a pod's IPC
// namespace (CRI's /proc/PID/ns/ipc of the pod's sandbox container) is
// in it, so a pod's containers share System V IPC and POSIX message
// queues; the pod's IPC sysctls are the namespace's (set by the pod's
// sandbox container, checked by the others). The host's IPC namespace,
// or anything but an IPC namespace, is refused at create, and nothing
// is left of the refused container.
func TestPodIPCNamespace(t *testing.T) {
	need(t, os.Geteuid() == 0, "a pod's containers are root's (tent-runc under containerd)")
	need(t, lookPath("busybox"), "busybox missing (apt-get install busybox-static)")
	runc := tentRunc(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	// create makes container id from a bundle whose process is args and
	// whose linux section is extra's; it returns the container's pid
	// (its init's) and create's error output.
	create := func(id string, args []string, linux map[string]any) (int, string, error) {
		bundle := filepath.Join(dir, id)
		writeRootfs(t, filepath.Join(bundle, "rootfs"))
		l := map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "mount"}, {"type": "network"}, {"type": "ipc"}}}
		for k, v := range linux {
			l[k] = v
		}
		writeJSON(t, filepath.Join(bundle, "config.json"), map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"},
			"process": map[string]any{"args": args, "cwd": "/", "env": []string{"PATH=/bin"}, "user": map[string]int{"uid": 0, "gid": 0}},
			"linux":   l})
		out, err := os.Create(filepath.Join(dir, id+".out"))
		if err != nil {
			t.Fatal(err)
		}
		defer out.Close()
		// Files, not pipes, which the supervisor keeps as the
		// container's stdio and Run would wait on.
		errPath := filepath.Join(dir, id+".err")
		stderr, err := os.Create(errPath)
		if err != nil {
			t.Fatal(err)
		}
		defer stderr.Close()
		pidFile := filepath.Join(dir, id+".pid")
		cmd := exec.Command(runc, "--root", root, "create", "--bundle", bundle, "--pid-file", pidFile, id)
		cmd.Stdout, cmd.Stderr = out, stderr
		if err := cmd.Run(); err != nil {
			msg, _ := os.ReadFile(errPath)
			return 0, string(msg), err
		}
		initPid, supervisor := containerPids(t, root, id, pidFile)
		t.Cleanup(func() {
			_ = exec.Command(runc, "--root", root, "delete", "--force", id).Run()
			reap(t, initPid)
			reap(t, supervisor)
		})
		return initPid, "", nil
	}
	run := func(id string) string {
		t.Helper()
		if out, err := exec.Command(runc, "--root", root, "start", id).CombinedOutput(); err != nil {
			t.Fatalf("start %s: %v %s", id, err, out)
		}
		var out []byte
		Eventually(t, id+" to stop", func() bool {
			st, _ := exec.Command(runc, "--root", root, "state", id).Output()
			out, _ = os.ReadFile(filepath.Join(dir, id+".out"))
			return bytes.Contains(st, []byte(`"stopped"`))
		})
		return strings.TrimSpace(string(out))
	}

	podPid, errOut, err := create("pod", []string{"sleep", "300"}, map[string]any{"sysctl": map[string]string{"kernel.shm_rmid_forced": "1"}})
	if err != nil {
		t.Fatalf("create pod: %v %s", err, errOut)
	}
	podIPC, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/ipc", podPid))
	if err != nil {
		t.Fatal(err)
	}
	hostIPC, _ := os.Readlink("/proc/self/ns/ipc")
	if podIPC == hostIPC {
		t.Fatalf("the pod's sandbox container is in the host's IPC namespace %s", hostIPC)
	}
	podPath := fmt.Sprintf("/proc/%d/ns/ipc", podPid)
	join := map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "mount"}, {"type": "network"}, {"type": "ipc", "path": podPath}},
		"sysctl": map[string]string{"kernel.shm_rmid_forced": "1"}}
	if _, errOut, err := create("member", []string{"sh", "-c", "readlink /proc/self/ns/ipc; cat /proc/sys/kernel/shm_rmid_forced"}, join); err != nil {
		t.Fatalf("create a container in the pod's IPC namespace: %v %s", err, errOut)
	}
	if got, want := run("member"), podIPC+"\n1"; got != want {
		t.Errorf("the pod's container says %q, want the pod's IPC namespace and sysctl %q", got, want)
	}

	// An IPC namespace that host root made (not a container's): owned by
	// the host's user namespace, as the host's own is.
	other := exec.Command("unshare", "--ipc", "sleep", "300")
	if err := other.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = other.Process.Kill(); _ = other.Wait() }()
	Eventually(t, "unshare's IPC namespace", func() bool {
		ns, _ := os.Readlink(fmt.Sprintf("/proc/%d/ns/ipc", other.Process.Pid))
		return ns != "" && ns != hostIPC
	})
	// A FIFO is refused at once, not waited on.
	fifo := filepath.Join(dir, "ns.fifo")
	if err := unix.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, path, sysctl, want string
	}{
		{"fifo", fifo, "1", "is not an IPC namespace"},
		{"host", "/proc/self/ns/ipc", "1", "is never joined"},
		{"hostmade", fmt.Sprintf("/proc/%d/ns/ipc", other.Process.Pid), "1", "is never joined"},
		{"notipc", fmt.Sprintf("/proc/%d/ns/net", podPid), "1", "is not an IPC namespace"},
		{"sysctl", podPath, "0", "which the container joins, has"},
	} {
		l := map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "mount"}, {"type": "network"}, {"type": "ipc", "path": c.path}},
			"sysctl": map[string]string{"kernel.shm_rmid_forced": c.sysctl}}
		_, errOut, err := create(c.name, []string{"true"}, l)
		if err == nil || !strings.Contains(errOut, c.want) {
			t.Errorf("%s: ipc path %s, kernel.shm_rmid_forced=%s: %v %q; want refused, %q", c.name, c.path, c.sysctl, err, errOut, c.want)
		}
		if _, err := os.Stat(filepath.Join(root, c.name)); !os.IsNotExist(err) {
			t.Errorf("%s: the refused container left %s (%v)", c.name, filepath.Join(root, c.name), err)
		}
	}
}
