// Package benchstat holds what tent's benchmarks measure with: medians,
// a process's memory from /proc, a cgroup's memory charge.
package benchstat

import (
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Median returns the median of d (d is not reordered); 0 for none.
func Median(d []time.Duration) time.Duration {
	if len(d) == 0 {
		return 0
	}
	s := slices.Clone(d)
	slices.Sort(s)
	return s[len(s)/2]
}

// KiB reads a "Key:  N kB" line of a /proc file (status, smaps_rollup):
// KiB(pid, "status", "VmRSS:"). It returns 0 when the process or the
// key is gone.
func KiB(pid int, file, key string) int64 {
	b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/" + file)
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, key); ok {
			if f := strings.Fields(v); len(f) > 0 {
				n, _ := strconv.ParseInt(f[0], 10, 64)
				return n
			}
		}
	}
	return 0
}

// CgroupCharge is what a sandbox's memory cgroup is charged, in bytes,
// from its directories: v2 memory.current, v1 memory.usage_in_bytes; 0
// without a memory cgroup.
func CgroupCharge(paths []string) int64 {
	for _, p := range paths {
		for _, f := range []string{"memory.current", "memory.usage_in_bytes"} {
			if b, err := os.ReadFile(filepath.Join(p, f)); err == nil {
				n, _ := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
				return n
			}
		}
	}
	return 0
}
