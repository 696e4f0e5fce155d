package oci_test

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// TestUpdate: `tent-runc update --resources -` (what containerd's shim
// runs for CRI's UpdateContainerResources) changes a live container's
// memory and pids limits in its cgroup; lifting a limit (-1) is refused
// and changes nothing.
func TestUpdate(t *testing.T) {
	need(t, os.Geteuid() == 0, "cgroup limits need root")
	need(t, lookPath("busybox"), "busybox missing (apt-get install busybox-static)")
	runc := tentRunc(t)
	dir := t.TempDir()
	root := filepath.Join(dir, "root")
	bundle := filepath.Join(dir, "bundle")
	writeRootfs(t, filepath.Join(bundle, "rootfs"))
	writeJSON(t, filepath.Join(bundle, "config.json"), map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"},
		"process": map[string]any{"args": []string{"sh", "-c", "read line"}, "cwd": "/", "env": []string{"PATH=/bin"}, "user": map[string]int{"uid": 0, "gid": 0}},
		"linux": map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "mount"}, {"type": "network"}},
			"resources": map[string]any{"memory": map[string]any{"limit": 64 << 20}, "pids": map[string]any{"limit": 32}}}})
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 0, 0, 0, 0) })
	runcDo := func(stdin string, args ...string) (string, error) {
		cmd := exec.Command(runc, append([]string{"--root", root}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	pidFile := filepath.Join(dir, "c1.pid")
	// The supervisor keeps create's stdio (the container's): files, not
	// pipes that CombinedOutput would wait on.
	errLog := filepath.Join(dir, "create.err")
	stderr, err := os.Create(errLog)
	if err != nil {
		t.Fatal(err)
	}
	defer stderr.Close()
	create := exec.Command(runc, "--root", root, "create", "--bundle", bundle, "--pid-file", pidFile, "c1")
	create.Stderr = stderr
	if err := create.Run(); err != nil {
		out, _ := os.ReadFile(errLog)
		t.Fatalf("create: %v %s", err, out)
	}
	initPid, supervisor := containerPids(t, root, "c1", pidFile)
	t.Cleanup(func() {
		_, _ = runcDo("", "kill", "--all", "c1", "KILL")
		if code := reap(t, initPid); code != 128+int(unix.SIGKILL) {
			t.Errorf("the container's init exited %d, want its process's %d (kill --all KILL)", code, 128+int(unix.SIGKILL))
		}
		reap(t, supervisor)
		_, _ = runcDo("", "delete", "--force", "c1")
	})
	data, err := os.ReadFile(filepath.Join(root, "c1", "state.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rec struct {
		Cgroups []string `json:"cgroups"`
	}
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	limits := func() (memory, pids string) {
		for _, d := range rec.Cgroups {
			for _, f := range []string{"memory.max", "memory.limit_in_bytes"} {
				if b, err := os.ReadFile(filepath.Join(d, f)); err == nil {
					memory = string(bytes.TrimSpace(b))
				}
			}
			if b, err := os.ReadFile(filepath.Join(d, "commands", "pids.max")); err == nil {
				pids = string(bytes.TrimSpace(b))
			}
		}
		return memory, pids
	}
	if m, p := limits(); m != "67108864" || p != "32" {
		t.Fatalf("limits at create: memory %q, pids %q; want the bundle's 67108864, 32", m, p)
	}
	if out, err := runcDo(`{"memory":{"limit":134217728},"pids":{"limit":64}}`, "update", "--resources", "-", "c1"); err != nil {
		t.Fatalf("update: %v %s", err, out)
	}
	if m, p := limits(); m != "134217728" || p != "64" {
		t.Errorf("limits after update: memory %q, pids %q; want 134217728, 64", m, p)
	}
	if out, err := runcDo(`{"memory":{"limit":-1}}`, "update", "--resources", "-", "c1"); err == nil {
		t.Errorf("update lifting the memory limit succeeded: %s", out)
	}
	if m, _ := limits(); m != "134217728" {
		t.Errorf("memory limit after a refused update: %q, want 134217728", m)
	}
}
