//go:build linux

package layer

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"sort"

	"github.com/tent-sandbox/tent/fs"

	"golang.org/x/sys/unix"
)

// Diff lists what an overlay's upper layer changed against its lower
// directory: files added, modified (content, mode or type) and deleted
// (whiteouts, and lower entries hidden by opaque directories). Paths are
// relative and slash-separated; the result is sorted. It reads only the
// host directories, so the sandbox may be running.
//
// The upper layer is the sandbox's to shape, and may change while Diff
// reads it: every entry is reached descriptor-relative from the two
// roots, without following any symlink (a symlink swapped in for a
// directory is reported as what it is, never walked), and contents are
// compared only between regular files opened O_NOFOLLOW|O_NONBLOCK and
// checked by fstat, up to the size fstat gave. Trees up to MaxDepth
// levels deep are walked; deeper ones fail with ErrTooDeep.
func Diff(lower, upper string) ([]Change, error) {
	ufd, err := openRootDir(upper)
	if err != nil {
		return nil, err
	}
	defer unix.Close(ufd)
	lfd, err := openRootDir(lower)
	if err != nil && !errors.Is(err, unix.ENOENT) {
		return nil, err
	}
	if err == nil {
		defer unix.Close(lfd)
	}
	d := &differ{upper: upper}
	err = d.dir(lfd, ufd, "", 0)
	sort.SliceStable(d.out, func(i, j int) bool { return d.out[i].Path < d.out[j].Path })
	return d.out, err
}

type differ struct {
	upper string
	out   []Change
}

func (d *differ) add(rel string, kind ChangeKind, dir bool) {
	d.out = append(d.out, Change{Path: rel, Kind: kind, Dir: dir, GitControl: fs.GitControl(rel)})
}

// dir compares the upper directory ufd (at rel) with the lower one lfd
// (-1 when lower has no directory there).
func (d *differ) dir(lfd, ufd int, rel string, depth int) error {
	if depth > MaxDepth {
		return fmt.Errorf("diff of %s: %s: %w", d.upper, rel, ErrTooDeep)
	}
	names, err := readNames(ufd)
	if err != nil {
		return fmt.Errorf("diff of %s: %w", d.upper, &os.PathError{Op: "readdir", Path: rel, Err: err})
	}
	for _, n := range names {
		r := joinRel(rel, n)
		ust, err := lstatAt(ufd, n)
		if err == unix.ENOENT {
			continue // removed meanwhile
		}
		if err != nil {
			return fmt.Errorf("diff of %s: %w", d.upper, &os.PathError{Op: "fstatat", Path: r, Err: err})
		}
		var lst unix.Stat_t
		inLower := false
		if lfd >= 0 {
			if lst, err = lstatAt(lfd, n); err == nil {
				inLower = true
			}
		}
		switch {
		case isWhiteoutStat(&ust):
			if inLower {
				if err := d.deleted(lfd, n, r, &lst, depth+1); err != nil {
					return err
				}
			}
		case isDirStat(&ust):
			cfd, err := openDir(ufd, n)
			if err == unix.ENOENT || err == unix.ELOOP || err == unix.ENOTDIR {
				continue // replaced meanwhile; never followed
			}
			if err != nil {
				return fmt.Errorf("diff of %s: %w", d.upper, &os.PathError{Op: "openat2", Path: r, Err: err})
			}
			err = d.subdir(lfd, cfd, n, r, inLower, &lst, depth)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		default:
			switch {
			case !inLower:
				d.add(r, Added, false)
			case isDirStat(&lst):
				if err := d.deleted(lfd, n, r, &lst, depth+1); err != nil {
					return err
				}
				d.add(r, Added, false)
			case changed(lfd, ufd, n, &lst, &ust):
				d.add(r, Modified, false)
			}
		}
	}
	return nil
}

// subdir handles the upper directory cfd named n in lfd's counterpart.
func (d *differ) subdir(lfd, cfd int, n, r string, inLower bool, lst *unix.Stat_t, depth int) error {
	if !inLower || !isDirStat(lst) {
		if inLower {
			d.add(r, Deleted, false)
		}
		d.add(r, Added, true)
		return d.dir(-1, cfd, r, depth+1) // children are added
	}
	lcfd, err := openDir(lfd, n)
	if err != nil {
		return fmt.Errorf("diff of %s: %w", d.upper, &os.PathError{Op: "openat2", Path: "lower " + r, Err: err})
	}
	defer unix.Close(lcfd)
	if isOpaque(cfd) {
		lnames, _ := readNames(lcfd)
		for _, ln := range lnames {
			if _, err := lstatAt(cfd, ln); err != unix.ENOENT {
				continue
			}
			if est, err := lstatAt(lcfd, ln); err == nil {
				if err := d.deleted(lcfd, ln, joinRel(r, ln), &est, depth+2); err != nil {
					return err
				}
			}
		}
	}
	return d.dir(lcfd, cfd, r, depth+1)
}

// deleted lists the lower entry name of lfd (at rel) and, for a
// directory, everything below it. The lower tree is the host's; entries
// it cannot read are left out.
func (d *differ) deleted(lfd int, name, rel string, st *unix.Stat_t, depth int) error {
	d.add(rel, Deleted, isDirStat(st))
	if !isDirStat(st) {
		return nil
	}
	if depth > MaxDepth {
		return fmt.Errorf("diff of %s: %s: %w", d.upper, rel, ErrTooDeep)
	}
	fd, err := openDir(lfd, name)
	if err != nil {
		return nil
	}
	defer unix.Close(fd)
	names, _ := readNames(fd)
	for _, n := range names {
		if cst, err := lstatAt(fd, n); err == nil {
			if err := d.deleted(fd, n, joinRel(rel, n), &cst, depth+1); err != nil {
				return err
			}
		}
	}
	return nil
}

// changed compares a copied-up entry (name in ufd) with its lower
// original (name in lfd): type and mode, symlink target, device number,
// then, for regular files, size and content. Only regular files are
// opened (O_NOFOLLOW|O_NONBLOCK, checked by fstat), and no more than the
// size fstat gave is read; anything that cannot be compared counts as
// changed.
func changed(lfd, ufd int, name string, lst, ust *unix.Stat_t) bool {
	if lst.Mode != ust.Mode {
		return true
	}
	switch {
	case isLinkStat(lst):
		a, err1 := readlinkAt(lfd, name)
		b, err2 := readlinkAt(ufd, name)
		return err1 != nil || err2 != nil || a != b
	case !isRegStat(lst):
		return lst.Rdev != ust.Rdev
	case lst.Size != ust.Size:
		return true
	}
	a, err := openRegular(lfd, name)
	if err != nil {
		return true
	}
	defer a.Close()
	b, err := openRegular(ufd, name)
	if err != nil {
		return true
	}
	defer b.Close()
	return !sameContent(a, b, ust.Size)
}

// sameContent compares the first size bytes of two regular files.
func sameContent(a, b *regularFile, size int64) bool {
	ba, bb := make([]byte, 64<<10), make([]byte, 64<<10)
	for off := int64(0); off < size; {
		k := int(min(int64(len(ba)), size-off))
		na, err1 := unix.Pread(a.Fd, ba[:k], off)
		nb, err2 := unix.Pread(b.Fd, bb[:k], off)
		if err1 != nil || err2 != nil || na != nb || !bytes.Equal(ba[:na], bb[:nb]) {
			return false
		}
		if na == 0 {
			return true // both shrank equally
		}
		off += int64(na)
	}
	return true
}
