package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

// fakeTree writes procRoot/self/{mountinfo,cgroup} and the given files into
// a temporary directory and returns procRoot and the directory standing for
// /sys. In mountinfo, "$SYS" stands for that directory.
func fakeTree(t *testing.T, mountinfo, selfCgroup string, files map[string]string) (procRoot, sys string) {
	t.Helper()
	dir := t.TempDir()
	procRoot = filepath.Join(dir, "proc")
	sys = filepath.Join(dir, "sys")
	write := func(path, content string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(procRoot, "self", "mountinfo"), strings.ReplaceAll(mountinfo, "$SYS", sys))
	write(filepath.Join(procRoot, "self", "cgroup"), selfCgroup)
	for name, content := range files {
		write(filepath.Join(sys, name), content)
	}
	return procRoot, sys
}

const unifiedMountinfo = `22 1 259:1 / / rw,relatime shared:1 - ext4 /dev/root rw
23 22 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw
24 22 0:22 / $SYS rw,nosuid,nodev,noexec,relatime shared:2 - sysfs sysfs rw
30 24 0:27 / $SYS/fs/cgroup rw,nosuid,nodev,noexec,relatime shared:4 - cgroup2 cgroup2 rw,nsdelegate,memory_recursiveprot
`

// hybridMountinfo is this development machine's layout (Debian 12).
const hybridMountinfo = `22 1 259:1 / / rw,relatime - ext4 /dev/root rw
30 22 0:27 / $SYS/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
31 30 0:28 / $SYS/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu
32 30 0:29 / $SYS/fs/cgroup/cpuacct rw,relatime - cgroup cgroup rw,cpuacct
33 30 0:30 / $SYS/fs/cgroup/cpuset rw,relatime - cgroup cgroup rw,cpuset
34 30 0:31 / $SYS/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
35 30 0:32 / $SYS/fs/cgroup/devices rw,relatime - cgroup cgroup rw,devices
36 30 0:33 / $SYS/fs/cgroup/freezer rw,relatime - cgroup cgroup rw,freezer
37 30 0:34 / $SYS/fs/cgroup/blkio rw,relatime - cgroup cgroup rw,blkio
38 30 0:35 / $SYS/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
39 30 0:36 / $SYS/fs/cgroup/systemd rw,relatime - cgroup cgroup rw,name=systemd
40 30 0:37 / $SYS/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
`

const hybridSelf = `9:name=systemd:/
8:pids:/
7:blkio:/
6:freezer:/
5:devices:/
4:memory:/process_api/ed59
3:cpuset:/
2:cpuacct:/
1:cpu:/
0::/
`

// legacyMountinfo co-mounts cpu and cpuacct, as systemd did on v1 hosts.
const legacyMountinfo = `22 1 259:1 / / rw,relatime - ext4 /dev/root rw
25 22 0:23 / $SYS/fs/cgroup ro,nosuid,nodev,noexec shared:9 - tmpfs tmpfs ro,mode=755
26 25 0:24 / $SYS/fs/cgroup/systemd rw,nosuid,nodev,noexec,relatime shared:10 - cgroup cgroup rw,xattr,release_agent=/lib/systemd/systemd-cgroups-agent,name=systemd
27 25 0:25 / $SYS/fs/cgroup/cpu,cpuacct rw,nosuid,nodev,noexec,relatime shared:11 - cgroup cgroup rw,cpu,cpuacct
28 25 0:26 / $SYS/fs/cgroup/memory rw,nosuid,nodev,noexec,relatime shared:12 - cgroup cgroup rw,memory
29 25 0:27 / $SYS/fs/cgroup/pids rw,nosuid,nodev,noexec,relatime shared:13 - cgroup cgroup rw,pids
30 25 0:28 / $SYS/fs/cgroup/freezer rw,nosuid,nodev,noexec,relatime shared:14 - cgroup cgroup rw,freezer
`

const legacySelf = `5:freezer:/
4:pids:/user.slice/user-1000.slice/session-2.scope
3:memory:/user.slice/user-1000.slice/session-2.scope
2:cpu,cpuacct:/user.slice
1:name=systemd:/user.slice/user-1000.slice/session-2.scope
`

func TestDetectUnified(t *testing.T) {
	const self = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"
	proc, sys := fakeTree(t, unifiedMountinfo, "0::"+self+"\n", map[string]string{
		"fs/cgroup/cgroup.controllers":                 "cpuset cpu io memory hugetlb pids rdma misc\n",
		"fs/cgroup" + self + "/cgroup.controllers":     "cpu memory pids\n",
		"fs/cgroup" + self + "/cgroup.subtree_control": "\n",
	})
	h, err := Detect(proc)
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode != Unified {
		t.Errorf("Mode = %v, want unified", h.Mode)
	}
	if want := filepath.Join(sys, "fs/cgroup"); h.V2Root != want {
		t.Errorf("V2Root = %q, want %q", h.V2Root, want)
	}
	if len(h.V1Mounts) != 0 {
		t.Errorf("V1Mounts = %v, want none", h.V1Mounts)
	}
	if want := []string{"cpu", "memory", "pids"}; !reflect.DeepEqual(h.V2Controllers, want) {
		t.Errorf("V2Controllers = %q, want %q", h.V2Controllers, want)
	}
	if h.Self[""] != self {
		t.Errorf("Self[\"\"] = %q, want %q", h.Self[""], self)
	}
	dir, err := h.dir("")
	if err != nil || dir != filepath.Join(sys, "fs/cgroup", self) {
		t.Errorf("dir(\"\") = %q, %v", dir, err)
	}
	if v, err := chooseVersion(h, Limits{Memory: 1}); v != V2 || err != nil {
		t.Errorf("chooseVersion = %v, %v; want v2", v, err)
	}
}

func TestDetectHybrid(t *testing.T) {
	proc, sys := fakeTree(t, hybridMountinfo, hybridSelf, map[string]string{
		"fs/cgroup/unified/cgroup.controllers": "\n",
	})
	h, err := Detect(proc)
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode != Hybrid {
		t.Errorf("Mode = %v, want hybrid", h.Mode)
	}
	cg := filepath.Join(sys, "fs/cgroup")
	if want := filepath.Join(cg, "unified"); h.V2Root != want {
		t.Errorf("V2Root = %q, want %q", h.V2Root, want)
	}
	for _, c := range []string{"cpu", "cpuacct", "cpuset", "memory", "devices", "freezer", "blkio", "pids", "name=systemd"} {
		want := filepath.Join(cg, strings.TrimPrefix(c, "name="))
		if h.V1Mounts[c] != want {
			t.Errorf("V1Mounts[%q] = %q, want %q", c, h.V1Mounts[c], want)
		}
	}
	if len(h.V2Controllers) != 0 {
		t.Errorf("V2Controllers = %q, want none", h.V2Controllers)
	}
	if h.Self["memory"] != "/process_api/ed59" || h.Self["pids"] != "/" || h.Self[""] != "/" {
		t.Errorf("Self = %v", h.Self)
	}
	dir, err := h.dir("memory")
	if err != nil || dir != filepath.Join(cg, "memory/process_api/ed59") {
		t.Errorf("dir(memory) = %q, %v", dir, err)
	}
	if v, err := chooseVersion(h, Limits{}); v != V1 || err != nil {
		t.Errorf("chooseVersion = %v, %v; want v1 (v2 has no memory controller)", v, err)
	}
	h.V2Controllers = []string{"memory", "pids"}
	if v, _ := chooseVersion(h, Limits{Memory: 1, Pids: 1}); v != V2 {
		t.Errorf("chooseVersion with memory and pids on v2 = %v, want v2", v)
	}
	if v, _ := chooseVersion(h, Limits{CPUs: 1}); v != V1 {
		t.Errorf("chooseVersion needing cpu, absent from v2 = %v, want v1", v)
	}
}

func TestDetectLegacy(t *testing.T) {
	proc, sys := fakeTree(t, legacyMountinfo, legacySelf, nil)
	h, err := Detect(proc)
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode != Legacy || h.V2Root != "" {
		t.Errorf("Mode = %v, V2Root = %q; want legacy and none", h.Mode, h.V2Root)
	}
	cg := filepath.Join(sys, "fs/cgroup")
	if h.V1Mounts["cpu"] != filepath.Join(cg, "cpu,cpuacct") || h.V1Mounts["cpuacct"] != h.V1Mounts["cpu"] {
		t.Errorf("cpu = %q, cpuacct = %q; want both co-mounted at cpu,cpuacct", h.V1Mounts["cpu"], h.V1Mounts["cpuacct"])
	}
	if _, ok := h.V1Mounts["release_agent=/lib/systemd/systemd-cgroups-agent"]; ok {
		t.Error("a mount option was taken for a controller")
	}
	if _, ok := h.V1Mounts["xattr"]; ok {
		t.Error("xattr was taken for a controller")
	}
	if h.V1Mounts["name=systemd"] == "" {
		t.Error("named hierarchy name=systemd missing")
	}

	p, err := planV1(h, "tent-x", Limits{Memory: 1 << 20, Pids: 5, CPUs: 1})
	if err != nil {
		t.Fatal(err)
	}
	want := []cgDir{
		{Path: filepath.Join(cg, "memory/user.slice/user-1000.slice/session-2.scope/tent-x"), Controllers: []string{"memory"}},
		{Path: filepath.Join(cg, "pids/user.slice/user-1000.slice/session-2.scope/tent-x"), Controllers: []string{"pids"}},
		{Path: filepath.Join(cg, "cpu,cpuacct/user.slice/tent-x"), Controllers: []string{"cpu"}},
		{Path: filepath.Join(cg, "freezer/tent-x"), Controllers: []string{"freezer"}},
	}
	if !reflect.DeepEqual(p.Dirs, want) {
		t.Errorf("planV1 dirs:\n got %v\nwant %v", p.Dirs, want)
	}
}

func TestDetectNone(t *testing.T) {
	proc, _ := fakeTree(t, "22 1 259:1 / / rw,relatime - ext4 /dev/root rw\n", "", nil)
	h, err := Detect(proc)
	if err != nil {
		t.Fatal(err)
	}
	if h.Mode != ModeNone {
		t.Errorf("Mode = %v, want none", h.Mode)
	}
	_, err = Create(h, "tent-x", Limits{})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Errorf("Create on a host without cgroups: %v, want ErrUnsupported", err)
	}
}

// TestDetectBindMount: inside a container the cgroup2 mount shows a subtree
// (mountinfo root /docker/abc) and /proc/self/cgroup names the full path.
// A second cgroup2 mount of an unrelated subtree is ignored.
func TestDetectBindMount(t *testing.T) {
	mi := `22 1 259:1 / / rw - overlay overlay rw
30 22 0:27 /other $SYS/other\040cgroup rw - cgroup2 cgroup2 rw
31 22 0:27 /docker/abc $SYS/fs/cgroup rw - cgroup2 cgroup2 rw
`
	proc, sys := fakeTree(t, mi, "0::/docker/abc/inner\n", map[string]string{
		"fs/cgroup/inner/cgroup.controllers": "memory pids\n",
	})
	h, err := Detect(proc)
	if err != nil {
		t.Fatal(err)
	}
	if h.V2Root != filepath.Join(sys, "fs/cgroup") {
		t.Errorf("V2Root = %q", h.V2Root)
	}
	dir, err := h.dir("")
	if err != nil || dir != filepath.Join(sys, "fs/cgroup/inner") {
		t.Errorf("dir = %q, %v", dir, err)
	}
	if want := []string{"memory", "pids"}; !reflect.DeepEqual(h.V2Controllers, want) {
		t.Errorf("V2Controllers = %q, want %q", h.V2Controllers, want)
	}
}

func TestParseMountinfoEscapes(t *testing.T) {
	m, err := parseMountinfo(`30 22 0:27 /a\134b /mnt/with\040space\011tab rw master:1 shared:2 - cgroup2 none rw` + "\n")
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || m[0].root != `/a\b` || m[0].point != "/mnt/with space\ttab" || m[0].fstype != "cgroup2" {
		t.Errorf("got %+v", m)
	}
	if _, err := parseMountinfo("1 2 3 4 5 6 no-separator\n"); err == nil {
		t.Error("a line without the - separator was accepted")
	}
}

func TestRelTo(t *testing.T) {
	for _, tc := range []struct {
		root, p, want string
		ok            bool
	}{
		{"/", "/a/b", "/a/b", true},
		{"/a", "/a", "/", true},
		{"/a", "/a/b", "/b", true},
		{"/a", "/ab", "", false},
		{"/", "/../x", "", false},
		{"/", "relative", "", false},
	} {
		got, ok := relTo(tc.root, tc.p)
		if got != tc.want || ok != tc.ok {
			t.Errorf("relTo(%q, %q) = %q, %v; want %q, %v", tc.root, tc.p, got, ok, tc.want, tc.ok)
		}
	}
}

func TestVersionModeStrings(t *testing.T) {
	if V1.String() != "v1" || V2.String() != "v2" || None.String() != "none" {
		t.Error("Version strings")
	}
	if Unified.String() != "unified" || Hybrid.String() != "hybrid" || Legacy.String() != "legacy" || ModeNone.String() != "none" {
		t.Error("Mode strings")
	}
}
