package oci

import (
	"fmt"
	"io"
	"os"
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
