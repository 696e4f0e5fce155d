package fs

import (
	"errors"
	"os"
	"reflect"
	"strings"
	"testing"
)

func TestValidateTarget(t *testing.T) {
	for _, tc := range []struct {
		target string
		ok     bool
	}{
		{"/work", true}, {"/home/me/project", true}, {"/tmp/x", true}, {"/procfs", true}, {"/device", true},
		{"", false}, {"work", false}, {"./work", false}, {"/work/../etc", false}, {"/..", false},
		{"/work/", false}, {"//work", false}, {"/work/./x", false}, {"/", false},
		{"/proc", false}, {"/proc/1", false}, {"/dev", false}, {"/dev/shm", false}, {"/sys", false}, {"/sys/fs/cgroup", false},
		{"/a\x00b", false},
	} {
		err := ValidateTarget(tc.target)
		if (err == nil) != tc.ok {
			t.Errorf("ValidateTarget(%q) = %v, want ok=%v", tc.target, err, tc.ok)
		}
		if err != nil && !errors.Is(err, ErrInvalidMount) {
			t.Errorf("ValidateTarget(%q): %v does not wrap ErrInvalidMount", tc.target, err)
		}
	}
}

func TestValidateMounts(t *testing.T) {
	exists := func(string) error { return nil }
	missing := func(string) error { return os.ErrNotExist }
	for _, tc := range []struct {
		name   string
		mounts []Mount
		stat   func(string) error
		want   string
	}{
		{"duplicate", []Mount{{Source: "/a", Target: "/x"}, {Source: "/b", Target: "/x"}}, exists, "already used by mount 1"},
		{"missing source", []Mount{{Source: "/nope", Target: "/x"}}, missing, "does not exist"},
		{"relative source", []Mount{{Source: "nope", Target: "/x"}}, exists, "not absolute"},
		{"reserved", []Mount{{Source: "/a", Target: "/dev/x"}}, exists, "reserved"},
		{"dotdot", []Mount{{Source: "/a", Target: "/x/../y"}}, exists, `".."`},
		{"bad access", []Mount{{Source: "/a", Target: "/x", Access: "wx"}}, exists, "unknown access"},
	} {
		err := Validate(tc.mounts, tc.stat)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !errors.Is(err, ErrInvalidMount) {
			t.Errorf("%s: got %v, want an ErrInvalidMount containing %q", tc.name, err, tc.want)
		}
	}
	if err := Validate([]Mount{{Source: "/a", Target: "/x", Access: ReadWrite}, {Source: "/b", Target: "/x/y"}}, exists); err != nil {
		t.Errorf("valid mounts: %v", err)
	}
}

func TestParseMount(t *testing.T) {
	for _, tc := range []struct {
		in, src, dst string
	}{
		{"/data", "/data", "/data"},
		{"/data:/in", "/data", "/in"},
		{"rel/dir:/work", "/home/me/rel/dir", "/work"},
		{".", "/home/me", "/home/me"},
		{"./x/../y", "/home/me/y", "/home/me/y"},
	} {
		m, err := ParseMount(tc.in, ReadWrite, "/home/me")
		if err != nil || m.Source != tc.src || m.Target != tc.dst || m.Access != ReadWrite {
			t.Errorf("ParseMount(%q) = %+v, %v; want %s:%s", tc.in, m, err, tc.src, tc.dst)
		}
	}
	for _, bad := range []string{"", ":/x", "/a:"} {
		if _, err := ParseMount(bad, ReadOnly, "/"); !errors.Is(err, ErrInvalidMount) {
			t.Errorf("ParseMount(%q): %v", bad, err)
		}
	}
}

func debianSystem() []SystemEntry {
	return []SystemEntry{{Path: "/usr"}, {Path: "/bin", LinkTo: "usr/bin"}, {Path: "/lib", LinkTo: "usr/lib"}, {Path: "/etc"}}
}

func TestNewPlanOrderAndContents(t *testing.T) {
	p, err := NewPlan(PlanInput{
		Mounts: []Mount{
			{Source: "/src/deep", Target: "/work/sub/deep", Access: ReadOnly},
			{Source: "/src", Target: "/work", Access: ReadWrite},
		},
		System: debianSystem(),
		Home:   "/home/me",
	})
	if err != nil {
		t.Fatal(err)
	}
	index := map[string]int{}
	for i, s := range p.Steps {
		index[s.Target] = i
	}
	for _, want := range []string{"/usr", "/bin", "/etc", "/proc", "/dev", "/dev/null", "/dev/pts", "/dev/shm", "/tmp", "/home/me", "/work", "/work/sub/deep"} {
		if _, ok := index[want]; !ok {
			t.Errorf("plan lacks %s", want)
		}
	}
	if index["/work"] > index["/work/sub/deep"] || index["/dev"] > index["/dev/null"] {
		t.Errorf("a child is mounted before its parent: %v", index)
	}
	if s := p.Steps[index["/bin"]]; s.Kind != KindSymlink || s.LinkTo != "usr/bin" {
		t.Errorf("/bin: %+v, want a symlink to usr/bin", s)
	}
	if s := p.Steps[index["/usr"]]; s.Kind != KindBind || !s.ReadOnly || s.Writable {
		t.Errorf("/usr: %+v, want a read-only bind", s)
	}
	if s := p.Steps[index["/work"]]; s.ReadOnly || !s.Writable || !s.User {
		t.Errorf("/work: %+v, want a writable user bind", s)
	}
	if s := p.Steps[index["/work/sub/deep"]]; !s.ReadOnly || s.FD != -1 {
		t.Errorf("/work/sub/deep: %+v", s)
	}
	if inside, ok := p.InsidePath("/src/deep/x"); !ok || inside != "/work/sub/deep/x" {
		t.Errorf("InsidePath = %q, %v", inside, ok)
	}
	if _, ok := p.InsidePath("/elsewhere"); ok {
		t.Error("InsidePath of an unmounted path succeeded")
	}
}

func TestNewPlanUserMountsReplaceAndCover(t *testing.T) {
	p, err := NewPlan(PlanInput{
		Mounts:    []Mount{{Source: "/opt/etc", Target: "/etc"}, {Source: "/h", Target: "/home/me", Access: ReadWrite}, {Source: "/t", Target: "/tmp"}},
		System:    debianSystem(),
		Home:      "/home/me",
		PreOpened: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range p.Steps {
		if s.Target == "/etc" && !s.User {
			t.Error("the system /etc is still bound under the user's /etc")
		}
		if (s.Target == "/home/me" || s.Target == "/tmp") && s.Kind == KindTmpfs {
			t.Errorf("a tmpfs shadows the user's %s", s.Target)
		}
		if s.User && s.FD < 0 {
			t.Errorf("pre-opened plan without a descriptor for %s", s.Target)
		}
	}
}

func TestNewPlanRefusesTargetsThroughHostSymlinks(t *testing.T) {
	_, err := NewPlan(PlanInput{Mounts: []Mount{{Source: "/x", Target: "/bin/tool"}}, System: debianSystem(), Home: "/root"})
	if !errors.Is(err, ErrInvalidMount) || !strings.Contains(err.Error(), "symlink") {
		t.Fatalf("got %v, want a refusal naming the symlink", err)
	}
}

func TestLandlockRulesMirrorThePlan(t *testing.T) {
	p, err := NewPlan(PlanInput{
		Mounts: []Mount{{Source: "/a", Target: "/ro"}, {Source: "/b", Target: "/rw", Access: ReadWrite}},
		System: debianSystem(),
		Home:   "/root",
	})
	if err != nil {
		t.Fatal(err)
	}
	rules := map[string]uint64{}
	for _, r := range LandlockRules(p) {
		rules[r.Path] = r.Access
	}
	all := HandledAccess(MaxLandlockABI)
	if rules["/"] != llReadExec {
		t.Errorf("/ grants %#x, want read+execute only", rules["/"])
	}
	for _, w := range []string{"/rw", "/tmp", "/root", "/dev/shm"} {
		if rules[w] != all {
			t.Errorf("%s grants %#x, want every right %#x", w, rules[w], all)
		}
	}
	if _, ok := rules["/ro"]; ok {
		t.Error("a read-only mount got a write rule")
	}
	if rules["/dev/null"]&llWriteFile == 0 || rules["/dev/null"]&llReadDir != 0 {
		t.Errorf("/dev/null grants %#x", rules["/dev/null"])
	}
	if HandledAccess(0) != 0 || HandledAccess(1) != llABI1 || HandledAccess(3)&llTruncate == 0 || HandledAccess(4)&llIoctlDev != 0 {
		t.Error("HandledAccess does not follow the ABI table")
	}
	if Scoped(5) != 0 || Scoped(6) == 0 {
		t.Error("Scoped does not follow the ABI table")
	}
}

func TestAddCgroupViewV2(t *testing.T) {
	p, err := NewPlan(PlanInput{System: debianSystem(), Home: "/root"})
	if err != nil {
		t.Fatal(err)
	}
	n := len(p.Steps)
	if err := p.AddCgroupView(nil); err != nil || len(p.Steps) != n {
		t.Fatalf("no cgroup: %v, %d steps (want %d): the sandbox gets no /sys", err, len(p.Steps), n)
	}
	if err := p.AddCgroupView([]CgroupDir{{Source: "/sys/fs/cgroup/user.slice/tent-1"}}); err != nil {
		t.Fatal(err)
	}
	want := Step{Kind: KindCgroup, Target: "/sys/fs/cgroup", Source: "/sys/fs/cgroup/user.slice/tent-1", ReadOnly: true, FD: -1}
	if len(p.Steps) != n+1 || !reflect.DeepEqual(p.Steps[n], want) {
		t.Fatalf("steps added: %+v, want only %+v", p.Steps[n:], want)
	}
	for _, r := range LandlockRules(p) {
		if strings.HasPrefix(r.Path, "/sys") {
			t.Errorf("Landlock rule %+v beneath the cgroup view", r)
		}
	}
	if err := p.AddCgroupView([]CgroupDir{{Source: "/sys/fs/cgroup/x"}}); err == nil {
		t.Error("a second cgroup view was added")
	}
}

func TestAddCgroupViewV1(t *testing.T) {
	p, err := NewPlan(PlanInput{System: debianSystem(), Home: "/root"})
	if err != nil {
		t.Fatal(err)
	}
	n := len(p.Steps)
	err = p.AddCgroupView([]CgroupDir{
		{Source: "/sys/fs/cgroup/memory/tent-1", Name: "memory"},
		{Source: "/sys/fs/cgroup/cpu,cpuacct/tent-1", Name: "cpu,cpuacct", Links: []string{"cpu", "cpuacct"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []Step{
		{Kind: KindTmpfs, Target: "/sys/fs/cgroup", Mode: 0o755, ReadOnly: true, FD: -1},
		{Kind: KindCgroup, Target: "/sys/fs/cgroup/memory", Source: "/sys/fs/cgroup/memory/tent-1", ReadOnly: true, FD: -1},
		{Kind: KindCgroup, Target: "/sys/fs/cgroup/cpu,cpuacct", Source: "/sys/fs/cgroup/cpu,cpuacct/tent-1", ReadOnly: true, FD: -1},
		{Kind: KindSymlink, Target: "/sys/fs/cgroup/cpu", LinkTo: "cpu,cpuacct", FD: -1},
		{Kind: KindSymlink, Target: "/sys/fs/cgroup/cpuacct", LinkTo: "cpu,cpuacct", FD: -1},
	}
	got := p.Steps[n:]
	if len(got) != len(want) {
		t.Fatalf("steps added: %+v, want %+v", got, want)
	}
	for i := range want {
		if got[i].Kind != want[i].Kind || got[i].Target != want[i].Target || got[i].Source != want[i].Source ||
			got[i].ReadOnly != want[i].ReadOnly || got[i].Writable || got[i].LinkTo != want[i].LinkTo || got[i].Mode != want[i].Mode || got[i].FD != -1 {
			t.Errorf("step %d: %+v, want %+v", i, got[i], want[i])
		}
	}
	for _, r := range LandlockRules(p) {
		if strings.HasPrefix(r.Path, "/sys") {
			t.Errorf("Landlock rule %+v beneath the cgroup view", r)
		}
	}
}

func TestAddCgroupViewRefusesBadLayouts(t *testing.T) {
	for _, tc := range []struct {
		name string
		dirs []CgroupDir
	}{
		{"relative source", []CgroupDir{{Source: "sys/fs/cgroup/x"}}},
		{"v2 with links", []CgroupDir{{Source: "/c/x", Links: []string{"cpu"}}}},
		{"v1 unnamed", []CgroupDir{{Source: "/c/memory/x", Name: "memory"}, {Source: "/c/pids/x"}}},
		{"dotdot", []CgroupDir{{Source: "/c/x", Name: ".."}}},
		{"slash", []CgroupDir{{Source: "/c/x", Name: "a/b"}}},
		{"duplicate", []CgroupDir{{Source: "/c/a/x", Name: "a"}, {Source: "/c/b/x", Name: "b", Links: []string{"a"}}}},
	} {
		p, err := NewPlan(PlanInput{System: debianSystem(), Home: "/root"})
		if err != nil {
			t.Fatal(err)
		}
		n := len(p.Steps)
		if err := p.AddCgroupView(tc.dirs); err == nil || len(p.Steps) != n {
			t.Errorf("%s: %v, %d steps added; want a refusal and none", tc.name, err, len(p.Steps)-n)
		}
	}
}

// A caller's root replaces the tmpfs and the system directories, comes
// first, keeps tent's /proc and /dev, and gets no /tmp or $HOME tmpfs.
func TestPlanRoot(t *testing.T) {
	root := &Mount{Source: "/b/rootfs", Target: "/", Access: ReadWrite}
	p, err := NewPlan(PlanInput{Root: root, System: []SystemEntry{{Path: "/usr"}}, Home: "/root", PreOpened: true,
		Mounts: []Mount{{Source: "/etc/hosts", Target: "/etc/hosts", Access: ReadOnly}}})
	if err != nil {
		t.Fatal(err)
	}
	first := p.Steps[0]
	if first.Kind != KindRoot || first.Source != "/b/rootfs" || first.FD != 1 || !first.Writable || first.ReadOnly {
		t.Errorf("first step %+v, want the writable root with descriptor 1", first)
	}
	seen := map[string]bool{}
	for _, s := range p.Steps[1:] {
		seen[s.Target] = true
		if s.Kind == KindRoot {
			t.Errorf("a second root step: %+v", s)
		}
	}
	for _, want := range []string{"/proc", "/dev", "/dev/null", "/etc/hosts"} {
		if !seen[want] {
			t.Errorf("no step for %s", want)
		}
	}
	for _, no := range []string{"/usr", "/tmp", "/root"} {
		if seen[no] {
			t.Errorf("a step for %s beside a caller's root", no)
		}
	}
	for _, bad := range []Mount{{Source: "rel", Target: "/"}, {Source: "/", Target: "/"}, {Source: "/b/../c", Target: "/"}, {Source: "/b", Target: "/x"}, {Source: "/b", Target: "/", Access: CopyOnWrite}} {
		if _, err := NewPlan(PlanInput{Root: &bad, Home: "/root"}); !errors.Is(err, ErrInvalidMount) {
			t.Errorf("root %+v: want ErrInvalidMount, got %v", bad, err)
		}
	}
}
