package fs

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"sort"

	"golang.org/x/sys/unix"
)

// GitGuardMounts turns guards into the mounts that apply them: each
// pinned directory bound onto itself read-write, each git directory's
// hooks directory and config file bound read-only (writes there fail with EROFS; renaming
// over or removing them, EBUSY). A missing hooks directory or config
// file is created first, as `git init` would (owned like the git
// directory, through a descriptor of it, never a symlink), so that the
// sandbox cannot plant one; what cannot be created is an error.
func GitGuardMounts(guards []GitGuard) ([]Mount, error) {
	var mounts []Mount
	for _, g := range guards {
		if g.Pin {
			mounts = append(mounts, Mount{Source: g.Dir, Target: g.Target, Access: ReadWrite})
		}
		if !g.Control {
			continue
		}
		if err := ensureGitControl(g.Dir); err != nil {
			return nil, fmt.Errorf("guarding the git directory %s: %w", g.Dir, err)
		}
		mounts = append(mounts,
			Mount{Source: filepath.Join(g.Dir, "hooks"), Target: path.Join(g.Target, "hooks"), Access: ReadOnly},
			Mount{Source: filepath.Join(g.Dir, "config"), Target: path.Join(g.Target, "config"), Access: ReadOnly},
		)
	}
	sort.SliceStable(mounts, func(i, j int) bool { return depth(mounts[i].Target) < depth(mounts[j].Target) })
	return mounts, nil
}

// ensureGitControl creates gitDir's hooks directory and config file
// where they are missing, owned as gitDir is, through a descriptor of
// gitDir opened without following symlinks; an existing entry of another
// type (a symlink to elsewhere, a FIFO) is refused.
func ensureGitControl(gitDir string) error {
	fd, err := OpenSource(gitDir)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	dir, err := unix.Openat(fd, ".", unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return os.NewSyscallError("openat", err)
	}
	defer unix.Close(dir)
	var st unix.Stat_t
	if err := unix.Fstat(dir, &st); err != nil {
		return os.NewSyscallError("fstat", err)
	}
	for _, e := range []struct {
		name string
		mode uint32
	}{{"hooks", unix.S_IFDIR}, {"config", unix.S_IFREG}} {
		var est unix.Stat_t
		err := unix.Fstatat(dir, e.name, &est, unix.AT_SYMLINK_NOFOLLOW)
		if err == nil {
			if est.Mode&unix.S_IFMT != e.mode {
				return fmt.Errorf("%s is not a %s", filepath.Join(gitDir, e.name), map[uint32]string{unix.S_IFDIR: "directory", unix.S_IFREG: "regular file"}[e.mode])
			}
			continue
		}
		if err != unix.ENOENT {
			return os.NewSyscallError("fstatat", err)
		}
		if e.mode == unix.S_IFDIR {
			err = unix.Mkdirat(dir, e.name, 0o755)
		} else {
			var f int
			f, err = unix.Openat(dir, e.name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o644)
			if err == nil {
				unix.Close(f)
			}
		}
		if err != nil {
			return fmt.Errorf("creating %s: %w", filepath.Join(gitDir, e.name), err)
		}
		if err := unix.Fchownat(dir, e.name, int(st.Uid), int(st.Gid), unix.AT_SYMLINK_NOFOLLOW); err != nil && err != unix.EPERM {
			return fmt.Errorf("chown %s: %w", filepath.Join(gitDir, e.name), err)
		}
	}
	return nil
}
