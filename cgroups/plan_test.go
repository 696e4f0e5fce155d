package cgroups

import (
	"errors"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

func TestV1Files(t *testing.T) {
	got := v1Files(Limits{Memory: 64 << 20, Pids: 16, CPUs: 0.5})
	want := []fileWrite{
		{Controller: "memory", File: "memory.limit_in_bytes", Value: "67108864"},
		{Controller: "memory", File: "memory.memsw.limit_in_bytes", Value: "67108864", Optional: true},
		{Controller: "pids", File: "pids.max", Value: "80"}, // 16 for the commands child, InitPidsAllowance
		{Controller: "cpu", File: "cpu.cfs_period_us", Value: "100000"},
		{Controller: "cpu", File: "cpu.cfs_quota_us", Value: "50000"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("v1Files:\n got %v\nwant %v", got, want)
	}
	if got := v1Files(Limits{}); len(got) != 0 {
		t.Errorf("v1Files(zero) = %v, want nothing", got)
	}
}

func TestV2Files(t *testing.T) {
	got := v2Files(Limits{Memory: 64 << 20, Pids: 16, CPUs: 2.5})
	want := []fileWrite{
		{Controller: "memory", File: "memory.max", Value: "67108864"},
		{Controller: "memory", File: "memory.swap.max", Value: "0", Optional: true},
		{Controller: "memory", File: "memory.oom.group", Value: "1", Optional: true},
		{Controller: "pids", File: "pids.max", Value: "80"}, // 16 for the commands child, InitPidsAllowance
		{Controller: "cpu", File: "cpu.max", Value: "250000 100000"},
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("v2Files:\n got %v\nwant %v", got, want)
	}
	// Without limits only the optional OOM group setting remains.
	want = []fileWrite{{Controller: "memory", File: "memory.oom.group", Value: "1", Optional: true}}
	if got := v2Files(Limits{}); !reflect.DeepEqual(got, want) {
		t.Errorf("v2Files(zero) = %v, want %v", got, want)
	}
	// A long-lived sandbox keeps the per-process OOM kill.
	for _, w := range v2Files(Limits{Memory: 64 << 20, PerProcessOOM: true}) {
		if w.File == "memory.oom.group" {
			t.Errorf("PerProcessOOM still writes %v", w)
		}
	}
}

func TestLimitsValidate(t *testing.T) {
	for _, tc := range []struct {
		l    Limits
		want string // "" for valid
	}{
		{Limits{}, ""},
		{Limits{Memory: 1, Pids: 1, CPUs: 0.01}, ""},
		{Limits{CPUs: 64}, ""},
		{Limits{Memory: -1}, "negative Memory -1"},
		{Limits{Pids: -5}, "negative Pids -5"},
		{Limits{CPUs: -0.5}, "negative CPUs -0.5"},
		{Limits{CPUs: 0.005}, "CPUs 0.005 is a quota of 500us per 100000us, below the kernel's minimum of 1000us"},
		{Limits{CPUs: math.NaN()}, "CPUs NaN is not a number of cores"},
		{Limits{CPUs: math.Inf(1)}, "CPUs +Inf is not a number of cores"},
		{Limits{CPUs: 1e300}, "CPUs 1e+300 is too large"},
	} {
		err := tc.l.validate()
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%+v: unexpected error %v", tc.l, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%+v: error %v, want one containing %q", tc.l, err, tc.want)
		case tc.want != "" && !errors.Is(err, ErrInvalid):
			t.Errorf("%+v: error %v does not wrap ErrInvalid", tc.l, err)
		}
	}
	// Every bad field is named, not only the first.
	err := Limits{Memory: -1, Pids: -1}.validate()
	if err == nil || !strings.Contains(err.Error(), "Memory") || !strings.Contains(err.Error(), "Pids") {
		t.Errorf("two bad fields: %v", err)
	}
}

func TestValidName(t *testing.T) {
	for _, bad := range []string{"", ".", "..", "a/b", "/abs", "x\x00y", "cgroup.procs"} {
		if err := validName(bad); !errors.Is(err, ErrInvalid) {
			t.Errorf("validName(%q) = %v, want ErrInvalid", bad, err)
		}
	}
	if err := validName("tent-0123abcd"); err != nil {
		t.Errorf("validName: %v", err)
	}
}

// TestCreateValidatesFirst: invalid input is refused before any host
// access, so a bogus Host is never touched.
func TestCreateValidatesFirst(t *testing.T) {
	h := &Host{Mode: Legacy, V1Mounts: map[string]string{"memory": "/nonexistent"}, Self: map[string]string{"memory": "/"}}
	if _, err := Create(h, "tent-x", Limits{Pids: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Create with Pids -1: %v, want ErrInvalid", err)
	}
	if _, err := Create(h, "../escape", Limits{}); !errors.Is(err, ErrInvalid) {
		t.Errorf("Create with name ../escape: %v, want ErrInvalid", err)
	}
}

func unifiedHost(self string, controllers ...string) *Host {
	return &Host{
		Mode:          Unified,
		V2Root:        "/sys/fs/cgroup",
		V1Mounts:      map[string]string{},
		V2Controllers: controllers,
		Self:          map[string]string{"": self},
	}
}

func TestPlanV2(t *testing.T) {
	const scope = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"
	h := unifiedHost(scope, "cpu", "memory", "pids")
	l := Limits{Memory: 1 << 30, CPUs: 1}

	p, err := planV2(h, "tent-1", l, []string{"memory"})
	if err != nil {
		t.Fatal(err)
	}
	want := v2Plan{
		Parent: "/sys/fs/cgroup" + scope,
		Dir:    "/sys/fs/cgroup" + scope + "/tent-1",
		Enable: []string{"pids", "cpu"}, // memory is already enabled; pids is optional
		Writes: v2Files(l),
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("planV2:\n got %+v\nwant %+v", p, want)
	}

	// After Create moved this process into tent-supervisor, sandboxes are
	// still created beside it, in the delegated scope.
	h.Self[""] = scope + "/" + leafName
	p, err = planV2(h, "tent-2", l, []string{"cpu", "memory", "pids"})
	if err != nil {
		t.Fatal(err)
	}
	if p.Parent != "/sys/fs/cgroup"+scope || p.Dir != "/sys/fs/cgroup"+scope+"/tent-2" || len(p.Enable) != 0 {
		t.Errorf("planV2 from the leaf: %+v", p)
	}

	// cpu is not delegated: the error names it and says how to fix it.
	h = unifiedHost(scope, "memory", "pids")
	_, err = planV2(h, "tent-3", l, nil)
	if !errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), `"cpu"`) || !strings.Contains(err.Error(), "Delegate=yes") {
		t.Errorf("planV2 without cpu: %v", err)
	}
	// No limit needs cpu: fine, and cpu is not enabled.
	p, err = planV2(h, "tent-4", Limits{Memory: 1}, nil)
	if err != nil || !reflect.DeepEqual(p.Enable, []string{"memory", "pids"}) {
		t.Errorf("planV2 memory only: %+v, %v", p, err)
	}
	// No controllers at all (a hybrid host's v2): zero limits still work.
	h = unifiedHost("/")
	h.V2Root = "/sys/fs/cgroup/unified"
	p, err = planV2(h, "tent-5", Limits{}, nil)
	if err != nil || len(p.Enable) != 0 || p.Dir != "/sys/fs/cgroup/unified/tent-5" {
		t.Errorf("planV2 without controllers: %+v, %v", p, err)
	}
}

func TestPlanV1(t *testing.T) {
	h := &Host{
		Mode: Hybrid,
		V1Mounts: map[string]string{
			"memory": "/sys/fs/cgroup/memory", "pids": "/sys/fs/cgroup/pids",
			"cpu": "/sys/fs/cgroup/cpu,cpuacct", "cpuacct": "/sys/fs/cgroup/cpu,cpuacct",
		},
		Self: map[string]string{"memory": "/a", "pids": "/", "cpu": "/b", "cpuacct": "/b"},
	}
	p, err := planV1(h, "tent-1", Limits{Pids: 3})
	if err != nil {
		t.Fatal(err)
	}
	want := v1Plan{
		Dirs: []cgDir{
			{Path: "/sys/fs/cgroup/memory/a/tent-1", Controllers: []string{"memory"}},
			{Path: "/sys/fs/cgroup/pids/tent-1", Controllers: []string{"pids"}},
			{Path: "/sys/fs/cgroup/cpu,cpuacct/b/tent-1", Controllers: []string{"cpu"}},
		},
		Writes: []fileWrite{{Controller: "pids", File: "pids.max", Value: "67"}},
		Pids:   3,
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("planV1:\n got %+v\nwant %+v", p, want)
	}
	delete(h.V1Mounts, "pids")
	if _, err := planV1(h, "tent-1", Limits{Pids: 3}); err == nil || !strings.Contains(err.Error(), `"pids"`) {
		t.Errorf("planV1 without pids mounted: %v", err)
	}
}

// TestCanCreateFakeUnified runs CanCreate against fake unified trees: the
// probe directory is made and removed, and the checks that would stop
// Create (a missing controller, other processes in the parent) are errors
// wrapping ErrNotDelegated that say how to fix them.
func TestCanCreateFakeUnified(t *testing.T) {
	const self = "/user.slice/user-1000.slice/user@1000.service/app.slice/run-r1.scope"
	for _, tc := range []struct {
		name, controllers, subtree, procs string
		want                              string // "" for success
	}{
		{"ready", "cpu memory pids", "cpu memory pids", "", ""},
		{"only us in the scope", "cpu memory pids", "", "4242\n", ""},
		{"no cpu", "memory pids", "memory pids", "", `controller "cpu" is not available`},
		{"busy scope", "cpu memory pids", "", "1\n2\n", "holds 2 processes besides this one"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			procs := strings.ReplaceAll(tc.procs, "4242", strconv.Itoa(os.Getpid()))
			proc, sys := fakeTree(t, unifiedMountinfo, "0::"+self+"\n", map[string]string{
				"fs/cgroup" + self + "/cgroup.controllers":     tc.controllers + "\n",
				"fs/cgroup" + self + "/cgroup.subtree_control": tc.subtree + "\n",
				"fs/cgroup" + self + "/cgroup.procs":           procs,
				"fs/cgroup" + self + "/cgroup.type":            "domain\n",
			})
			h, err := Detect(proc)
			if err != nil {
				t.Fatal(err)
			}
			v, err := CanCreate(h)
			if v != V2 {
				t.Errorf("version %v, want v2", v)
			}
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("unexpected error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			case tc.want != "" && (!errors.Is(err, ErrNotDelegated) || !strings.Contains(err.Error(), "Delegate=yes")):
				t.Errorf("error %v does not wrap ErrNotDelegated with a fix", err)
			}
			entries, err := os.ReadDir(filepath.Join(sys, "fs/cgroup", self))
			if err != nil {
				t.Fatal(err)
			}
			for _, e := range entries {
				if e.IsDir() {
					t.Errorf("CanCreate left %s behind", e.Name())
				}
			}
		})
	}
}

func TestClassify(t *testing.T) {
	perm := &os.PathError{Op: "mkdir", Path: "/sys/fs/cgroup/x", Err: unix.EACCES}
	err := classify(V1, perm)
	var pe *os.PathError
	if !errors.Is(err, ErrNotDelegated) || !errors.Is(err, unix.EACCES) || !errors.As(err, &pe) || pe.Path != "/sys/fs/cgroup/x" {
		t.Errorf("classify(EACCES) = %v: want ErrNotDelegated, EACCES and the path", err)
	}
	if !strings.Contains(err.Error(), "run as root") {
		t.Errorf("v1 hint missing: %v", err)
	}
	if err := classify(V2, &os.PathError{Op: "open", Path: "/x", Err: unix.EROFS}); !strings.Contains(err.Error(), "Delegate=yes") {
		t.Errorf("v2 hint missing: %v", err)
	}
	missing := writeFile(filepath.Join(t.TempDir(), "missing"), "1")
	if !errors.Is(missing, fs.ErrNotExist) || classify(V1, missing) != missing {
		t.Errorf("writeFile of a missing file: %v; it must fail with ENOENT, unclassified", missing)
	}
}

func TestKeyedInt(t *testing.T) {
	const events = "low 0\nhigh 0\nmax 12\noom 3\noom_kill 2\noom_group_kill 0\n"
	if n, ok := keyedInt(events, "oom_kill"); !ok || n != 2 {
		t.Errorf("oom_kill = %d, %v", n, ok)
	}
	if _, ok := keyedInt(events, "oom_kil"); ok {
		t.Error("prefix matched")
	}
	const oomControl = "oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"
	if n, ok := keyedInt(oomControl, "oom_kill"); !ok || n != 7 {
		t.Errorf("v1 oom_kill = %d, %v", n, ok)
	}
}
