package oci

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// checkOwned refuses a state directory that is not a directory of this
// user's, or that others can write.
func checkOwned(path string, fi os.FileInfo) error {
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("state directory %s is not a directory", path)
	case !ok || int(st.Uid) != os.Geteuid():
		return fmt.Errorf("state directory %s does not belong to uid %d", path, os.Geteuid())
	case fi.Mode().Perm()&0o022 != 0:
		return fmt.Errorf("state directory %s is writable by others (mode %v)", path, fi.Mode().Perm())
	}
	return nil
}

// readSmall reads a regular file of at most max bytes, not following a
// final symlink.
func readSmall(path string, max int64) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, max+1))
	if err != nil {
		return nil, err
	}
	if int64(len(data)) > max {
		return nil, fmt.Errorf("%s is larger than %d bytes", path, max)
	}
	return data, nil
}

// pidStart is a process's start time (field 22 of /proc/PID/stat), which
// tells a pid's process from a later one that reuses the pid.
func pidStart(pid int) (uint64, error) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: skip
	// past its last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("malformed /proc/%d/stat", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive reports whether r's supervisor still runs (and is not a zombie).
func (r *record) alive() bool {
	start, err := pidStart(r.Pid)
	if err != nil || start != r.PidStart {
		return false
	}
	data, err := os.ReadFile("/proc/" + strconv.Itoa(r.Pid) + "/stat")
	if err != nil {
		return false
	}
	i := bytes.LastIndexByte(data, ')')
	return i >= 0 && i+2 < len(data) && data[i+2] != 'Z' && data[i+2] != 'X'
}
