package fs

import (
	"errors"
	"os"
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
