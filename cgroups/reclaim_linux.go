package cgroups

import (
	"errors"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// Reclaim removes the directories of a cgroup whose owner died (one per
// hierarchy on cgroup v1) with their subtrees, where no [State] was kept
// to [Reopen] it. Their processes got SIGKILL when their owner died, but
// a frozen cgroup keeps them on cgroup v1 until it is thawed: so Reclaim
// thaws every directory, sends SIGKILL to whatever they still list, and
// removes them, children first, retrying for a second per directory
// while the processes leave. Directories already gone are skipped. The
// caller vouches that dirs are cgroup directories it may remove.
func Reclaim(dirs []string) {
	var all []string // each cgroup's subtree, deepest first
	for _, dir := range dirs {
		sub, _ := subtree(dir)
		all = append(all, sub...)
	}
	for _, d := range all {
		_ = writeFile(filepath.Join(d, "freezer.state"), "THAWED") // v1
		_ = writeFile(filepath.Join(d, "cgroup.freeze"), "0")      // v2
	}
	for _, d := range all {
		for i := 0; i < 100; i++ {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			pids, _ := readPids(filepath.Join(d, "cgroup.procs"))
			for _, pid := range pids {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}
