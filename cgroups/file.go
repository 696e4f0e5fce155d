package cgroups

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// ErrNotDelegated marks a failure that delegation would fix: permission
// denied (EACCES, EPERM) or a read-only cgroup file system (EROFS) while
// creating or configuring a cgroup, a controller missing from the caller's
// cgroup v2 cgroup.controllers, or cgroup v2 refusing to enable controllers
// because the caller's cgroup holds other processes. The error's message
// says what to do.
var ErrNotDelegated = errors.New("cgroup not delegated")

// Hints appended to ErrNotDelegated errors.
const (
	hintV2 = "run tent in a delegated cgroup, e.g. `systemd-run --user --scope -p Delegate=yes tent ...`"
	hintV1 = "run as root or ask an administrator to create a cgroup owned by you in each controller"
)

func hint(v Version) string {
	if v == V1 {
		return hintV1
	}
	return hintV2
}

// isPermission reports whether err is one that delegation would fix.
func isPermission(err error) bool {
	return errors.Is(err, unix.EACCES) || errors.Is(err, unix.EPERM) || errors.Is(err, unix.EROFS)
}

// classify wraps permission errors with ErrNotDelegated and a hint for v;
// other errors are returned unchanged.
func classify(v Version, err error) error {
	if err == nil || !isPermission(err) {
		return err
	}
	return fmt.Errorf("%w: %w; %s", ErrNotDelegated, err, hint(v))
}

// writeFile writes value to an existing cgroup file in one write(2); it
// never creates the file. Errors are *os.PathError.
func writeFile(path, value string) error {
	f, err := os.OpenFile(path, os.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	_, err = f.WriteString(value)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// readFile returns the content of a cgroup file. Errors are *os.PathError.
func readFile(path string) (string, error) {
	b, err := os.ReadFile(path)
	return string(b), err
}

// readInt reads a file holding one decimal integer.
func readInt(path string) (int64, error) {
	s, err := readFile(path)
	if err != nil {
		return 0, err
	}
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("failed to parse %s: %w", path, err)
	}
	return n, nil
}

// keyedInt returns the value of the "key N" line in a flat-keyed file such
// as memory.events, cgroup.events or memory.oom_control.
func keyedInt(data, key string) (int64, bool) {
	for line := range strings.Lines(data) {
		k, v, ok := strings.Cut(strings.TrimSpace(line), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}

// readKeyed reads path and returns the value of key in it.
func readKeyed(path, key string) (int64, error) {
	data, err := readFile(path)
	if err != nil {
		return 0, err
	}
	n, ok := keyedInt(data, key)
	if !ok {
		return 0, fmt.Errorf("%s: no %q line", path, key)
	}
	return n, nil
}

// readPids returns the pids listed in a cgroup.procs file; a missing file
// (the cgroup is gone) lists none.
func readPids(path string) ([]int, error) {
	data, err := readFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for f := range strings.FieldsSeq(data) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("failed to parse %s: %w", path, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// rmdir removes a cgroup directory. A missing directory is success; EBUSY
// (processes still exiting, or a child cgroup) is retried until ctx is done.
func rmdir(ctx context.Context, path string) error {
	return poll(ctx, func() (bool, error) {
		err := unix.Rmdir(path)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return true, nil
		}
		return false, &os.PathError{Op: "rmdir", Path: path, Err: err}
	}, unix.EBUSY)
}

// poll calls check until it reports done, it fails, or ctx is done, sleeping
// 100µs, 200µs, ... up to 50ms between calls (the kernel usually finishes
// a freeze, a thaw or a cgroup's last exit within a millisecond: a first
// sleep of 1ms cost Terminate and Snapshot milliseconds for nothing). An error that wraps one of
// retryable is retried; when ctx ends the last such error is joined to
// ctx's error.
func poll(ctx context.Context, check func() (done bool, err error), retryable ...error) error {
	delay := 100 * time.Microsecond
	var last error
	for {
		done, err := check()
		if done {
			return nil
		}
		if err != nil {
			retry := false
			for _, r := range retryable {
				retry = retry || errors.Is(err, r)
			}
			if !retry {
				return err
			}
			last = err
		}
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return errors.Join(ctx.Err(), last)
		case <-t.C:
		}
		delay = min(2*delay, 50*time.Millisecond)
	}
}
