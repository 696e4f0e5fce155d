package files

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"unsafe"

	"golang.org/x/sys/unix"
)

const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_MOVED_FROM |
	unix.IN_MOVED_TO | unix.IN_ATTRIB | unix.IN_DELETE_SELF | unix.IN_MOVE_SELF | unix.IN_ONLYDIR

// dirWatch is one running watch: its inotify descriptor and the
// directory each watch descriptor stands for, relative to the root.
type dirWatch struct {
	fd        int
	root      string
	recursive bool
	entries   bool
	dirs      map[int]string
	// commit is the cookie of the last rename away of a temporary of the
	// file helper's write (WriteTemps): its rename into place is reported
	// as the write it is.
	commit    uint32
	hasCommit bool
}

func watchDir(path string, flags []string, stdin io.Reader, stdout io.Writer) error {
	fi, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !fi.IsDir() {
		return &os.PathError{Op: "watch", Path: path, Err: unix.ENOTDIR}
	}
	w := &dirWatch{root: path, dirs: map[int]string{}}
	for _, f := range flags {
		switch f {
		case "recursive":
			w.recursive = true
		case "entries":
			w.entries = true
		default:
			return &os.PathError{Op: "watch", Path: path, Err: fmt.Errorf("unknown flag %q: %w", f, unix.EINVAL)}
		}
	}
	fd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return os.NewSyscallError("inotify_init1", err)
	}
	// A non-blocking descriptor goes through Go's poller: closing it
	// ends a pending Read.
	in := os.NewFile(uintptr(fd), "inotify")
	defer in.Close()
	w.fd = fd
	if err := w.add("."); err != nil {
		return err
	}
	out := bufio.NewWriter(stdout)
	enc := json.NewEncoder(out)
	if err := enc.Encode(WatchEvent{Ready: true}); err != nil {
		return err
	}
	if err := out.Flush(); err != nil {
		return err
	}
	go func() {
		_, _ = io.Copy(io.Discard, stdin)
		in.Close()
	}()
	buf := make([]byte, 64<<10)
	for {
		n, err := in.Read(buf)
		if errors.Is(err, os.ErrClosed) {
			return nil
		}
		if err != nil {
			return err
		}
		done, err := w.events(buf[:n], enc)
		if err != nil {
			return err
		}
		if err := out.Flush(); err != nil {
			return err
		}
		if done {
			return nil
		}
	}
}

// add watches the directory rel (relative to the root) and, when
// recursive, every directory beneath it.
func (w *dirWatch) add(rel string) error {
	if len(w.dirs) >= MaxWatchDirs {
		return &os.PathError{Op: "watch", Path: w.root, Err: fmt.Errorf("more than %d directories: %w", MaxWatchDirs, unix.ENOSPC)}
	}
	full := filepath.Join(w.root, rel)
	wd, err := unix.InotifyAddWatch(w.fd, full, watchMask)
	if err != nil {
		if rel != "." && (errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR)) {
			return nil // gone meanwhile
		}
		return &os.PathError{Op: "inotify_add_watch", Path: full, Err: err}
	}
	w.dirs[wd] = rel
	if !w.recursive {
		return nil
	}
	ents, err := os.ReadDir(full)
	if err != nil {
		return nil
	}
	for _, e := range ents {
		if e.IsDir() { // a symlink is not followed
			if err := w.add(filepath.Join(rel, e.Name())); err != nil {
				return err
			}
		}
	}
	return nil
}

// events writes the events in buf; done reports that the root is gone.
func (w *dirWatch) events(buf []byte, enc *json.Encoder) (done bool, err error) {
	for off := 0; off+unix.SizeofInotifyEvent <= len(buf); {
		ev := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
		end := off + unix.SizeofInotifyEvent + int(ev.Len)
		if end > len(buf) {
			break
		}
		name := string(buf[off+unix.SizeofInotifyEvent : end])
		for len(name) > 0 && name[len(name)-1] == 0 {
			name = name[:len(name)-1]
		}
		off = end
		dir, known := w.dirs[int(ev.Wd)]
		if ev.Mask&unix.IN_IGNORED != 0 {
			delete(w.dirs, int(ev.Wd))
			if dir == "." {
				return true, nil
			}
			continue
		}
		if !known {
			continue
		}
		ops := watchOps(ev.Mask)
		if ev.Mask&unix.IN_ISDIR == 0 && WriteTemps.Match(name) {
			// The helper's temporary, a write under way: not reported;
			// its rename into place is, as E2B's daemon reports its
			// write (see WatchEvent).
			if ev.Mask&unix.IN_MOVED_FROM != 0 {
				w.commit, w.hasCommit = ev.Cookie, true
			}
			continue
		}
		if ev.Mask&unix.IN_MOVED_TO != 0 && w.hasCommit && ev.Cookie == w.commit {
			ops, w.hasCommit = []string{"create", "chmod", "write"}, false
		}
		rel := filepath.Join(dir, name)
		self := ev.Mask&(unix.IN_DELETE_SELF|unix.IN_MOVE_SELF) != 0
		if self && dir != "." {
			continue // reported by its parent's watch
		}
		if w.recursive && ev.Mask&unix.IN_ISDIR != 0 && ev.Mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 {
			if err := w.add(rel); err != nil {
				return false, err
			}
		}
		for _, op := range ops {
			e := WatchEvent{Op: op, Name: rel}
			if w.entries {
				if fi, err := lstatInfo(filepath.Join(w.root, rel)); err == nil {
					e.Info = &fi
				}
			}
			if err := enc.Encode(e); err != nil {
				return false, err
			}
		}
		if self {
			return true, nil
		}
	}
	return false, nil
}

// watchOps names the changes in an inotify mask, as fsnotify (which
// E2B's daemon uses) would.
func watchOps(mask uint32) []string {
	var ops []string
	for _, m := range []struct {
		bits uint32
		op   string
	}{
		{unix.IN_CREATE | unix.IN_MOVED_TO, "create"},
		{unix.IN_MOVED_FROM | unix.IN_MOVE_SELF, "rename"},
		{unix.IN_ATTRIB, "chmod"},
		{unix.IN_MODIFY, "write"},
		{unix.IN_DELETE | unix.IN_DELETE_SELF, "remove"},
	} {
		if mask&m.bits != 0 && !slices.Contains(ops, m.op) {
			ops = append(ops, m.op)
		}
	}
	return ops
}
