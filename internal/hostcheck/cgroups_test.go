package hostcheck

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// Realistic /proc/self/mountinfo samples, trimmed to the interesting lines.
const (
	// Debian 12 / Ubuntu 22.04 with systemd defaults.
	mountinfoUnified = `22 28 0:20 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
23 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
26 22 0:23 / /sys/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
27 22 0:24 / /sys/fs/pstore rw,nosuid,nodev,noexec,relatime shared:10 - pstore pstore rw
`
	// systemd's hybrid layout (Debian 10, Ubuntu 20.04).
	mountinfoHybrid = `24 29 0:22 / /sys rw,nosuid,nodev,noexec,relatime shared:7 - sysfs sysfs rw
29 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw,errors=remount-ro
30 24 0:26 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
35 30 0:31 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:15 - cgroup cgroup rw,cpu,cpuacct
36 30 0:32 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:16 - cgroup cgroup rw,memory
37 30 0:33 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:17 - cgroup cgroup rw,pids
38 30 0:34 / /sys/fs/cgroup/net_cls,net_prio rw,nosuid,nodev,noexec,relatime shared:18 - cgroup cgroup rw,net_cls,net_prio
39 30 0:35 / /sys/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:19 - cgroup cgroup rw,freezer
`
	// cgroup v1 only (CentOS 7, or systemd.legacy_systemd_cgroup_controller).
	mountinfoLegacy = `18 62 0:18 / /sys rw,nosuid,nodev,noexec,relatime shared:6 - sysfs sysfs rw,seclabel
24 18 0:20 / /sys/fs/cgroup ro,nosuid,nodev,noexec shared:7 - tmpfs tmpfs ro,seclabel,mode=755
25 24 0:21 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:8 - cgroup cgroup rw,seclabel,xattr,release_agent=/usr/lib/systemd/systemd-cgroups-agent,name=systemd
28 24 0:24 / /sys/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,seclabel,cpu,cpuacct
29 24 0:25 / /sys/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,seclabel,memory
30 24 0:26 / /sys/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,seclabel,pids
`
	// Only systemd's named hierarchy beside cgroup2: every controller is
	// free for v2, so this is unified for tent's purposes.
	mountinfoNamedOnly = `31 30 0:27 / /sys/fs/cgroup/unified rw,nosuid,nodev,noexec,relatime shared:10 - cgroup2 cgroup2 rw,nsdelegate
32 30 0:28 / /sys/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,xattr,name=systemd
`
	mountinfoNone = `28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro
`
)

func TestHostCheckCgroupMode(t *testing.T) {
	tests := []struct {
		name      string
		mountinfo string
		mode      string
		v2Root    string
		v1        []string
	}{
		{"unified", mountinfoUnified, CgroupUnified, "/sys/fs/cgroup", nil},
		{"hybrid", mountinfoHybrid, CgroupHybrid, "/sys/fs/cgroup/unified",
			[]string{"cpu", "cpuacct", "freezer", "memory", "net_cls", "net_prio", "pids"}},
		{"legacy", mountinfoLegacy, CgroupLegacy, "", []string{"cpu", "cpuacct", "memory", "pids"}},
		{"named hierarchy only", mountinfoNamedOnly, CgroupUnified, "/sys/fs/cgroup/unified", nil},
		{"none", mountinfoNone, CgroupNone, "", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// Read through a fake /proc tree, as Doctor reads procRoot/self/mountinfo.
			proc := fakeTree(t, map[string]string{"self/mountinfo": tt.mountinfo})
			f, err := os.Open(filepath.Join(proc, "self", "mountinfo"))
			if err != nil {
				t.Fatal(err)
			}
			defer f.Close()
			got, err := CgroupMode(f)
			if err != nil {
				t.Fatal(err)
			}
			if got.Mode != tt.mode || got.V2Root != tt.v2Root || !slices.Equal(got.V1Controllers, tt.v1) {
				t.Errorf("CgroupMode = %+v, want mode %s, v2 %q, v1 %v", got, tt.mode, tt.v2Root, tt.v1)
			}
		})
	}
	if _, err := CgroupMode(strings.NewReader("1 2 3\n")); err == nil {
		t.Error("CgroupMode accepted a malformed line")
	}
}

func TestHostCheckCgroups(t *testing.T) {
	hybrid, _ := CgroupMode(strings.NewReader(mountinfoHybrid))
	unified, _ := CgroupMode(strings.NewReader(mountinfoUnified))
	none, _ := CgroupMode(strings.NewReader(mountinfoNone))
	denied := errors.New("cannot create a cgroup: permission denied")

	got := Cgroups(hybrid, CgroupProbe{Version: "v1", Controllers: []string{"memory", "pids", "cpu"}})
	if got.Status != Available || !strings.Contains(got.Detail, "hybrid") || !strings.Contains(got.Detail, "v1 sandbox cgroups with memory, pids, cpu") {
		t.Errorf("hybrid, root: %+v", got)
	}
	got = Cgroups(hybrid, CgroupProbe{Version: "v1", Err: denied})
	if got.Status != Degraded || !strings.Contains(got.Detail, "permission denied") || !strings.Contains(got.Detail, "--best-effort") || got.Fix != CgroupFixV1 {
		t.Errorf("hybrid, unprivileged: %+v", got)
	}
	got = Cgroups(unified, CgroupProbe{Version: "v2", Err: denied})
	if got.Status != Degraded || !strings.Contains(got.Fix, "systemd-run --user --scope -p Delegate=yes") {
		t.Errorf("unified, undelegated: %+v", got)
	}
	got = Cgroups(unified, CgroupProbe{Version: "v2", Controllers: []string{"cpu", "memory", "pids"}})
	if got.Status != Available || !strings.Contains(got.Detail, "unified") || !strings.Contains(got.Detail, "v2") {
		t.Errorf("unified, delegated: %+v", got)
	}
	got = Cgroups(none, CgroupProbe{Version: "none", Err: errors.New("no cgroup hierarchy is mounted")})
	if got.Status != Degraded || got.Fix != CgroupFixNone {
		t.Errorf("none: %+v", got)
	}
}
