package cgroups

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Usage is what a cgroup's processes use now.
type Usage struct {
	// MemoryBytes is the memory in use, without the page cache that can be
	// dropped (inactive files), as docker stats counts it.
	MemoryBytes int64 `json:"memory_bytes"`
	// MemoryLimit is the memory limit (0: none).
	MemoryLimit int64 `json:"memory_limit,omitempty"`
	// CPUNanos is the CPU time used since the cgroup was made: cgroup v2
	// cpu.stat usage_usec, v1 cpuacct.usage, or, where no such counter
	// is in the directories, the user and system times of its processes
	// (with those of the children they waited for).
	CPUNanos int64 `json:"cpu_ns"`
	// Pids is the number of tasks (processes and threads): pids.current,
	// else the processes of cgroup.procs.
	Pids int64 `json:"pids"`
	// PidsLimit is the task limit (0: none).
	PidsLimit int64 `json:"pids_limit,omitempty"`
}

// ReadUsage reads the usage of one cgroup from its directories: the
// cgroup v2 directory, or each v1 hierarchy's. A file is read from the
// first directory that has it; a counter no directory has reads as 0.
// The caller vouches for dirs (they are read, never written).
func ReadUsage(dirs []string) Usage {
	var u Usage
	read := func(name string) (string, bool) {
		for _, d := range dirs {
			if b, err := os.ReadFile(filepath.Join(d, name)); err == nil {
				return strings.TrimSpace(string(b)), true
			}
		}
		return "", false
	}
	num := func(name string) (int64, bool) {
		v, ok := read(name)
		if !ok {
			return 0, false
		}
		n, err := strconv.ParseInt(v, 10, 64)
		return n, err == nil
	}
	keyed := func(name, key string) (int64, bool) {
		v, ok := read(name)
		if !ok {
			return 0, false
		}
		for _, line := range strings.Split(v, "\n") {
			if k, val, ok := strings.Cut(line, " "); ok && k == key {
				n, err := strconv.ParseInt(val, 10, 64)
				return n, err == nil
			}
		}
		return 0, false
	}
	limit := func(name string) int64 {
		if n, ok := num(name); ok && n < 1<<62 {
			return n // "max" and v1's page-rounded int64 maximum are no limit
		}
		return 0
	}
	if n, ok := num("memory.current"); ok {
		inactive, _ := keyed("memory.stat", "inactive_file")
		u.MemoryBytes, u.MemoryLimit = max(0, n-inactive), limit("memory.max")
	} else if n, ok := num("memory.usage_in_bytes"); ok {
		inactive, _ := keyed("memory.stat", "total_inactive_file")
		u.MemoryBytes, u.MemoryLimit = max(0, n-inactive), limit("memory.limit_in_bytes")
	}
	if n, ok := keyed("cpu.stat", "usage_usec"); ok {
		u.CPUNanos = n * 1000
	} else if n, ok := num("cpuacct.usage"); ok {
		u.CPUNanos = n
	} else {
		u.CPUNanos = procsCPU(read)
	}
	if n, ok := num(CommandsName + "/pids.current"); ok {
		// A pids limit is its commands child's (Create).
		u.Pids, u.PidsLimit = n, limit(CommandsName+"/pids.max")
	} else if n, ok := num("pids.current"); ok {
		u.Pids, u.PidsLimit = n, limit("pids.max")
	} else if v, ok := read("cgroup.procs"); ok {
		u.Pids = int64(len(strings.Fields(v)))
	}
	return u
}

// procsCPU sums the CPU times (utime, stime, cutime, cstime) of the
// processes in cgroup.procs, in nanoseconds.
func procsCPU(read func(string) (string, bool)) int64 {
	v, _ := read("cgroup.procs")
	var ticks int64
	for _, pid := range strings.Fields(v) {
		b, err := os.ReadFile("/proc/" + pid + "/stat")
		if err != nil {
			continue
		}
		// Fields after the command (which may hold spaces) in parentheses.
		i := strings.LastIndexByte(string(b), ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(string(b)[i+1:])
		// utime, stime, cutime, cstime are fields 14-17 of stat: 11-14 here.
		for _, s := range f[min(11, len(f)):min(15, len(f))] {
			n, _ := strconv.ParseInt(s, 10, 64)
			ticks += n
		}
	}
	return ticks * (1e9 / clockTicks)
}

// clockTicks is USER_HZ, the unit of /proc/PID/stat times (100 on every
// Linux architecture Go supports).
const clockTicks = 100
