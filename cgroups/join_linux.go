package cgroups

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// cgroupRoot is where the host's cgroup hierarchies are mounted.
const cgroupRoot = "/sys/fs/cgroup"

// JoinPath moves this process into the cgroup at cgroupsPath, an OCI
// bundle's linux.cgroupsPath in its cgroupfs form (an absolute path:
// "/NS/ID" from ctr, "/kubepods/.../ID" from CRI with cgroupfs), in
// every cgroup v1 hierarchy but cpuset (whose new cgroups start with no
// CPUs) and named ones, or in the cgroup v2 hierarchy of a host that has
// no v1 controllers, making the missing levels. A sandbox's supervisor
// joins it before it makes the sandbox, whose cgroup [Create] makes a
// child of the caller's own: so containerd's shim, which reads a
// container's metrics and OOM events from the cgroup of the pid it
// reaps, sees the container's processes, with tent's own limits on the
// child. On a pure cgroup v2 host Create moves the process one level
// down (tent-supervisor), and the shim then sees it only. "" and the
// systemd form (slice:prefix:name) are not followed: the process stays
// where it is. created are the directories this call made, deepest
// last, for [RemoveJoined] once the process is gone.
func JoinPath(cgroupsPath string) (created []string, err error) {
	if cgroupsPath == "" || strings.Contains(cgroupsPath, ":") {
		return nil, nil
	}
	if !path.IsAbs(cgroupsPath) || path.Clean(cgroupsPath) != cgroupsPath || cgroupsPath == "/" || strings.Contains(cgroupsPath, "/../") {
		return nil, fmt.Errorf("linux.cgroupsPath %q: want an absolute, clean path below the root", cgroupsPath)
	}
	f, err := os.Open("/proc/self/cgroup")
	if err != nil {
		return nil, err
	}
	defer f.Close()
	var dirs []string
	v1 := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		_, rest, _ := strings.Cut(sc.Text(), ":")
		ctrls, _, _ := strings.Cut(rest, ":")
		switch {
		case ctrls == "":
			continue // v2: below, only without v1 controllers
		case strings.HasPrefix(ctrls, "name="), ctrls == "cpuset":
			continue
		}
		v1 = true
		if fi, err := os.Stat(filepath.Join(cgroupRoot, ctrls)); err == nil && fi.IsDir() {
			dirs = append(dirs, filepath.Join(cgroupRoot, ctrls))
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !v1 {
		if _, err := os.Stat(filepath.Join(cgroupRoot, "cgroup.controllers")); err == nil {
			dirs = append(dirs, cgroupRoot)
		}
	}
	defer func() {
		if err != nil {
			_ = RemoveJoined(created)
			created = nil
		}
	}()
	for _, mount := range dirs {
		// Make each missing level, remembering what was made.
		dir := mount
		for _, elem := range strings.Split(strings.TrimPrefix(cgroupsPath, "/"), "/") {
			dir = filepath.Join(dir, elem)
			if err := unix.Mkdir(dir, 0o755); err == nil {
				created = append(created, dir)
			} else if !errors.Is(err, unix.EEXIST) {
				return created, fmt.Errorf("linux.cgroupsPath: %w", &os.PathError{Op: "mkdir", Path: dir, Err: err})
			}
		}
		procs := filepath.Join(dir, "cgroup.procs")
		if err := os.WriteFile(procs, []byte(strconv.Itoa(os.Getpid())), 0); err != nil {
			return created, fmt.Errorf("linux.cgroupsPath: joining %s: %w", dir, err)
		}
	}
	return created, nil
}

// RemoveJoined removes the cgroup directories dirs (made by JoinPath),
// deepest first; a directory still in use (another container's parent)
// stays, and a path that is not a clean one beneath /sys/fs/cgroup is
// never touched (dirs may come from a record).
func RemoveJoined(dirs []string) error {
	sorted := slices.Clone(dirs)
	slices.SortFunc(sorted, func(a, b string) int { return strings.Count(b, "/") - strings.Count(a, "/") })
	var errs []error
	for _, d := range sorted {
		if !strings.HasPrefix(d, cgroupRoot+"/") || filepath.Clean(d) != d {
			continue // never anything but a cgroup
		}
		err := unix.Rmdir(d)
		if err == nil || errors.Is(err, unix.ENOENT) || errors.Is(err, unix.EBUSY) || errors.Is(err, unix.ENOTEMPTY) {
			continue
		}
		errs = append(errs, &os.PathError{Op: "rmdir", Path: d, Err: err})
	}
	return errors.Join(errs...)
}

// LeaveJoined moves this process back to the root cgroup of the
// hierarchies of dirs (made by JoinPath) and removes dirs.
func LeaveJoined(dirs []string) {
	for _, d := range dirs {
		rel, err := filepath.Rel(cgroupRoot, d)
		if err != nil || rel == "." || strings.HasPrefix(rel, "..") {
			continue
		}
		mount := cgroupRoot
		if first, _, ok := strings.Cut(rel, "/"); ok {
			if _, err := os.Stat(filepath.Join(cgroupRoot, first, "cgroup.procs")); err == nil {
				mount = filepath.Join(cgroupRoot, first) // a v1 hierarchy
			}
		}
		_ = os.WriteFile(filepath.Join(mount, "cgroup.procs"), []byte(strconv.Itoa(os.Getpid())), 0)
	}
	_ = RemoveJoined(dirs)
}
