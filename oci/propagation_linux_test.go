package oci_test

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// A container whose rootfs, and a directory it binds, are shared mounts
// (a bundle's rootfs bind-mounted on itself under a shared /, as on every
// systemd host, which is how containerd's snapshots look there): it
// starts (pivot_root refuses a shared new root), none of the sandbox's
// own mounts (/proc, /dev, masks) appears in the caller's mount table,
// during the run or after delete, and a mount the host makes beneath
// the bound directory meanwhile does not appear in the container, but
// does beneath a bind whose options say rslave (Kubernetes'
// HostToContainer), and a mount made inside never reaches the host. Run
// in a mount namespace of its own whose / is shared (unshare -m
// --propagation shared), so that the machine's own table is untouched.
func TestSharedMountsStayOutOfTheHost(t *testing.T) {
	need(t, os.Geteuid() == 0, "mounting needs root")
	need(t, lookPath("busybox"), "busybox missing (apt-get install busybox-static)")
	need(t, lookPath("unshare"), "unshare missing (util-linux)")
	runc := tentRunc(t)
	dir := t.TempDir()
	bundle, root, shared, slave := filepath.Join(dir, "bundle"), filepath.Join(dir, "root"), filepath.Join(dir, "shared"), filepath.Join(dir, "slave")
	writeRootfs(t, filepath.Join(bundle, "rootfs"))
	for _, d := range []string{shared, slave} {
		if err := os.MkdirAll(filepath.Join(d, "sub"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	writeJSON(t, filepath.Join(bundle, "config.json"), map[string]any{"ociVersion": "1.0.2", "root": map[string]any{"path": "rootfs"},
		"process": map[string]any{"args": []string{"sleep", "600"}, "cwd": "/", "env": []string{"PATH=/bin"}, "user": map[string]int{"uid": 0, "gid": 0}},
		"mounts": []map[string]any{{"destination": "/mnt", "type": "bind", "source": shared, "options": []string{"rbind", "ro"}},
			{"destination": "/slave", "type": "bind", "source": slave, "options": []string{"rbind", "rw", "rslave"}}},
		"linux": map[string]any{"namespaces": []map[string]string{{"type": "pid"}, {"type": "mount"}, {"type": "network"}}, "rootfsPropagation": "rslave"}})
	// Each check prints "NAME=VALUE" for the test to read.
	script := fmt.Sprintf(`set -u
rootfs=%[1]s/rootfs
mount --bind "$rootfs" "$rootfs" && mount --bind %[2]s %[2]s && mount --bind %[5]s %[5]s || exit 90
count() { grep -c " $1[ /]" /proc/self/mountinfo; }
%[3]s --root %[4]s create --bundle %[1]s c1 || exit 91
%[3]s --root %[4]s start c1 || exit 92
echo "running=$(count "$rootfs")"
mount -t tmpfs hostmount %[2]s/sub || exit 93
mount -t tmpfs hostmount %[5]s/sub && echo from-host > %[5]s/sub/f || exit 95
echo "inside=$(%[3]s --root %[4]s exec c1 head -n 100000 /proc/self/mountinfo | grep -c ' /mnt/sub ')"
echo "bound=$(%[3]s --root %[4]s exec c1 head -n 100000 /proc/self/mountinfo | grep -c ' /mnt ')"
echo "slave=$(%[3]s --root %[4]s exec c1 sh -c 'read -r l < /slave/sub/f; echo $l')"
echo "slavewrite=$(%[3]s --root %[4]s exec c1 sh -c 'echo in > /slave/sub/g && cat /slave/sub/g')"
echo "hostsees=$(cat %[5]s/sub/g)"
echo "mountinside=$(%[3]s --root %[4]s exec c1 sh -c 'mount -t tmpfs x /slave 2>&1; echo $?' | tail -n 1)"
echo "slavecount=$(grep -c " %[5]s[ /]" /proc/self/mountinfo)"
%[3]s --root %[4]s delete --force c1 || exit 94
echo "deleted=$(count "$rootfs")"
echo "slaveafter=$(grep -c " %[5]s[ /]" /proc/self/mountinfo)"
`, bundle, shared, runc, root, slave)
	t.Cleanup(func() { _ = exec.Command(runc, "--root", root, "delete", "--force", "c1").Run() })
	out, err := exec.Command("unshare", "-m", "--propagation", "shared", "sh", "-c", script).CombinedOutput()
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	got := map[string]string{}
	for _, line := range strings.Split(string(out), "\n") {
		if k, v, ok := strings.Cut(line, "="); ok {
			got[k] = v
		}
	}
	// The rootfs's own bind is the one mount at or beneath it.
	want := map[string]string{"running": "1", "bound": "1", "inside": "0", "deleted": "1",
		// The rslave bind: the host's tmpfs beneath it, written through
		// (it is the same mount); the container's own mount refused
		// (seccomp), and nothing of the container's in the host's table
		// beneath the source: as many mounts there while it runs as
		// after it is deleted.
		"slave": "from-host", "slavewrite": "in", "hostsees": "in", "mountinside": "1", "slavecount": got["slaveafter"]}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %q, want %q (the sandbox's mounts must not propagate either way)\n%s", k, got[k], v, out)
		}
	}
}
