package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestSetLimitsV1: a live cgroup's limits change (raised, then lowered:
// the memory+swap limit is never below the memory limit on the way),
// zero fields keep theirs, and a limit the cgroup cannot take fails
// closed: nothing written.
func TestSetLimitsV1(t *testing.T) {
	h := requireV1(t)
	c, err := Create(h, testName(), Limits{Memory: 64 << 20, Pids: 16, CPUs: 0.5})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, c)
	mem, _ := c.dirFor("memory")
	pids, _ := c.dirFor("pids")
	cpu, _ := c.dirFor("cpu")
	check := func(when string, want map[string]string) {
		t.Helper()
		for path, v := range want {
			if got := readTrim(t, path); got != v {
				t.Errorf("%s: %s = %q, want %q", when, path, got, v)
			}
		}
	}
	if err := c.SetLimits(Limits{Memory: 128 << 20, Pids: 32, CPUs: 1}); err != nil {
		t.Fatal(err)
	}
	check("raised", map[string]string{
		filepath.Join(mem, "memory.limit_in_bytes"):   "134217728",
		filepath.Join(pids, "pids.max"):               "96", // 32 and InitPidsAllowance
		filepath.Join(pids, CommandsName, "pids.max"): "32",
		filepath.Join(cpu, "cpu.cfs_quota_us"):        "100000",
	})
	if memsw := filepath.Join(mem, "memory.memsw.limit_in_bytes"); fileExists(memsw) {
		check("raised", map[string]string{memsw: "134217728"})
	}
	if err := c.SetLimits(Limits{Memory: 32 << 20}); err != nil {
		t.Fatal(err)
	}
	check("memory lowered", map[string]string{
		filepath.Join(mem, "memory.limit_in_bytes"):   "33554432",
		filepath.Join(pids, CommandsName, "pids.max"): "32",
		filepath.Join(cpu, "cpu.cfs_quota_us"):        "100000",
	})
	if err := c.SetLimits(Limits{Memory: -1}); !errors.Is(err, ErrInvalid) {
		t.Errorf("a negative limit: %v, want ErrInvalid", err)
	}

	bare, err := Create(h, testName(), Limits{Memory: 64 << 20})
	if err != nil {
		t.Fatal(err)
	}
	destroyOnCleanup(t, bare)
	err = bare.SetLimits(Limits{Memory: 96 << 20, Pids: 8})
	if !errors.Is(err, errors.ErrUnsupported) {
		t.Fatalf("a pids limit on a cgroup made without one: %v, want errors.ErrUnsupported", err)
	}
	bmem, _ := bare.dirFor("memory")
	check("refused", map[string]string{filepath.Join(bmem, "memory.limit_in_bytes"): "67108864"})
}

// TestSetLimitsV2NoController: a v2 cgroup made without a CPU limit has
// the cpu controller only if its parent hands it down (a host that
// enables it at the root, as the VM does): there a CPU limit is applied;
// without it, a CPU limit fails closed and changes nothing.
func TestSetLimitsV2NoController(t *testing.T) {
	c := createV2Core(t)
	dir, _ := c.dirFor("cpu")
	cpuMax := filepath.Join(dir, "cpu.max")
	err := c.SetLimits(Limits{CPUs: 1})
	if !fileExists(cpuMax) {
		if !errors.Is(err, errors.ErrUnsupported) {
			t.Errorf("a CPU limit without the cpu controller: %v, want errors.ErrUnsupported", err)
		}
		return
	}
	if err != nil {
		t.Fatalf("a CPU limit with the cpu controller handed down: %v", err)
	}
	if b, err := os.ReadFile(cpuMax); err != nil || !strings.HasPrefix(string(b), "100000 ") {
		t.Errorf("cpu.max: %q, %v; want one CPU's quota (100000 per period)", b, err)
	}
}
