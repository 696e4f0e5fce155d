package layer

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// fuzzNames are the names generated trees use: ordinary, and with
// spaces, a newline, an escape sequence, a leading dash, non-ASCII and
// invalid UTF-8 bytes.
var fuzzNames = []string{"a", "b", "venv", "sp ace", "new\nline", "\x1b[31mred", "-dash", "ünï", "\xff\xfe", "d"}

// buildFuzzTrees builds lower and upper from ops, three bytes an
// operation (what, name, argument). victim is an outside directory that
// upper's absolute symlinks point to.
func buildFuzzTrees(t *testing.T, ops []byte, lower, upper, victim string) (sparse map[string]bool) {
	t.Helper()
	sparse = map[string]bool{}
	dirs := map[string][]string{lower: {""}, upper: {""}}
	for i := 0; i+2 < len(ops) && i < 3*64; i += 3 {
		op, name, arg := ops[i]%10, fuzzNames[int(ops[i+1])%len(fuzzNames)], ops[i+2]
		root := upper
		if op < 2 {
			root = lower
		}
		parent := dirs[root][int(arg)%len(dirs[root])]
		rel := filepath.Join(parent, name)
		p := filepath.Join(root, rel)
		var err error
		switch op {
		case 0, 2:
			if err = os.Mkdir(p, 0o755); err == nil {
				dirs[root] = append(dirs[root], rel)
			}
		case 1, 3: // O_EXCL: never open what is there (a FIFO would block)
			var f *os.File
			if f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, os.FileMode(0o600|int(arg)&0o077)); err == nil {
				f.Write(bytes.Repeat([]byte{arg}, int(arg)%7+int(op)))
				f.Close()
			}
		case 4: // a symlink out of the tree, possibly in place of a lower directory
			target := victim
			if arg%2 == 1 {
				target = strings.Repeat("../", strings.Count(rel, "/")+3) + "victim"
			}
			err = os.Symlink(target, p)
		case 5:
			err = unix.Mkfifo(p, 0o644)
		case 6: // 64 MiB apparent, one page of data
			var f *os.File
			if f, err = os.OpenFile(p, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644); err == nil {
				f.Truncate(64 << 20)
				f.WriteAt([]byte("data"), int64(arg)<<18)
				f.Close()
				sparse[rel] = true
			}
		case 7: // a whiteout (needs CAP_MKNOD; skipped without)
			err = unix.Mknod(p, unix.S_IFCHR, 0)
		case 8: // an opaque directory
			if err = os.Mkdir(p, 0o755); err == nil {
				dirs[root] = append(dirs[root], rel)
				err = unix.Setxattr(p, opaqueXattr, []byte("y"), 0)
			}
		case 9: // a symlink inside the tree
			err = os.Symlink(name, p)
		}
		_ = err // name taken, or no privilege: the tree is as it is
	}
	return sparse
}

// fuzzEntry is what a tree shows at one path.
type fuzzEntry struct {
	kind byte // d, f, l, p
	perm os.FileMode
	data string // a file's content hash, a link's target
}

func entryOf(t *testing.T, p string, fi os.FileInfo) (fuzzEntry, bool) {
	switch {
	case fi.IsDir():
		return fuzzEntry{kind: 'd'}, true
	case fi.Mode()&os.ModeSymlink != 0:
		l, err := os.Readlink(p)
		if err != nil {
			t.Fatal(err)
		}
		return fuzzEntry{kind: 'l', data: l}, true
	case fi.Mode()&os.ModeNamedPipe != 0:
		return fuzzEntry{kind: 'p', perm: fi.Mode().Perm()}, true
	case fi.Mode().IsRegular():
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		h := sha256.New()
		io.Copy(h, f)
		return fuzzEntry{kind: 'f', perm: fi.Mode().Perm(), data: hex.EncodeToString(h.Sum(nil))}, true
	}
	return fuzzEntry{}, false // whiteouts, devices
}

// mergedView is the reference overlay semantics, by path (the trees are
// the test's and still): upper entries hide lower ones, whiteouts delete,
// directories merge unless upper's is opaque or lower's is not one.
func mergedView(t *testing.T, lower, upper string) map[string]fuzzEntry {
	view := map[string]fuzzEntry{}
	var rec func(rel string, inLower, inUpper bool)
	rec = func(rel string, inLower, inUpper bool) {
		names := map[string]bool{}
		opaque := false
		if inUpper {
			ents, _ := os.ReadDir(filepath.Join(upper, rel))
			for _, e := range ents {
				names[e.Name()] = true
			}
			b := make([]byte, 4)
			n, err := unix.Lgetxattr(filepath.Join(upper, rel), opaqueXattr, b)
			opaque = err == nil && n == 1 && b[0] == 'y'
		}
		if inLower && !opaque {
			ents, _ := os.ReadDir(filepath.Join(lower, rel))
			for _, e := range ents {
				names[e.Name()] = true
			}
		}
		for n := range names {
			r := filepath.Join(rel, n)
			if inUpper {
				if fi, err := os.Lstat(filepath.Join(upper, r)); err == nil {
					if isWhiteout(fi) {
						continue
					}
					if e, ok := entryOf(t, filepath.Join(upper, r), fi); ok {
						view[r] = e
						if e.kind == 'd' {
							lfi, err := os.Lstat(filepath.Join(lower, r))
							rec(r, inLower && !opaque && err == nil && lfi.IsDir(), true)
						}
					}
					continue
				}
			}
			if fi, err := os.Lstat(filepath.Join(lower, r)); err == nil && inLower && !opaque {
				if e, ok := entryOf(t, filepath.Join(lower, r), fi); ok {
					view[r] = e
					if e.kind == 'd' {
						rec(r, true, false)
					}
				}
			}
		}
	}
	rec("", true, true)
	return view
}

// treeView is what a plain tree shows.
func treeView(t *testing.T, root string) map[string]fuzzEntry {
	view := map[string]fuzzEntry{}
	filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if e, ok := entryOf(t, p, fi); ok {
			view[rel] = e
		}
		return nil
	})
	return view
}

// copyTree copies a plain tree of directories, files and symlinks.
func copyTree(t *testing.T, src, dst string) {
	filepath.Walk(src, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == src {
			return nil
		}
		rel, _ := filepath.Rel(src, p)
		q := filepath.Join(dst, rel)
		switch {
		case fi.IsDir():
			os.Mkdir(q, fi.Mode().Perm())
		case fi.Mode()&os.ModeSymlink != 0:
			l, _ := os.Readlink(p)
			os.Symlink(l, q)
		case fi.Mode().IsRegular():
			b, _ := os.ReadFile(p)
			os.WriteFile(q, b, fi.Mode().Perm())
		}
		return nil
	})
}

func diffViews(a, b map[string]fuzzEntry) string {
	var out []string
	for p, e := range a {
		if f, ok := b[p]; !ok || f != e {
			out = append(out, fmt.Sprintf("%q: want %+v, got %+v (present %v)", p, e, f, ok))
		}
	}
	for p, f := range b {
		if _, ok := a[p]; !ok {
			out = append(out, fmt.Sprintf("%q: unexpected %+v", p, f))
		}
	}
	return strings.Join(out, "\n")
}

// FuzzDiffExport generates a lower and an upper tree — directories,
// files of varied modes, absolute and relative symlinks out of the tree
// (also in place of lower directories), symlinks inside, FIFOs, 64 MiB
// sparse files, whiteouts, opaque directories, odd names — and checks
// that Diff and ApplyChanges onto a copy of lower never open, read or
// change anything outside their roots (an inotify-watched victim the
// symlinks point at), that the export reproduces the overlay's merged
// view exactly, that sparse files stay sparse, and that WriteTar then
// ExtractTar of the upper reproduces it (FIFOs excepted) without
// reaching out either.
func FuzzDiffExport(f *testing.F) {
	f.Add([]byte{0, 2, 0, 1, 2, 1, 4, 2, 0})                               // lower venv/.. ; upper venv -> victim
	f.Add([]byte{0, 0, 0, 1, 1, 1, 2, 0, 0, 3, 1, 1, 5, 3, 0, 6, 4, 9})    // merged dir, file, FIFO, sparse
	f.Add([]byte{0, 4, 0, 1, 5, 1, 8, 4, 0, 3, 6, 1, 7, 1, 0, 1, 1, 0})    // opaque dir, odd names, whiteout
	f.Add([]byte{1, 9, 0, 4, 9, 1, 0, 3, 0, 1, 0, 1, 2, 3, 0, 9, 7, 1, 3}) // file replaced by link, link inside
	f.Add([]byte{0, 6, 0, 1, 7, 1, 2, 6, 0, 4, 7, 1, 5, 0, 0, 6, 2, 3})
	f.Fuzz(func(t *testing.T, ops []byte) {
		base := t.TempDir()
		lower, upper, dst, restored := filepath.Join(base, "lower"), filepath.Join(base, "upper"), filepath.Join(base, "dst"), filepath.Join(base, "restored")
		for _, d := range []string{lower, upper, dst, restored} {
			if err := os.Mkdir(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
		v := newVictim(t)
		// The relative links climb to base/victim: make it the victim's.
		if err := os.Symlink(v.dir, filepath.Join(base, "victim")); err != nil {
			t.Fatal(err)
		}
		sparse := buildFuzzTrees(t, ops, lower, upper, v.dir)
		copyTree(t, lower, dst)
		want := mergedView(t, lower, upper)
		v.drain()

		changes, err := Diff(lower, upper)
		if err != nil {
			t.Fatalf("diff: %v", err)
		}
		if err := ApplyChanges(dst, upper, changes); err != nil {
			t.Fatalf("export: %v\nchanges: %+v", err, changes)
		}
		var arch bytes.Buffer
		if err := WriteTar(&arch, upper); err != nil {
			t.Fatalf("archive: %v", err)
		}
		if err := ExtractTar(&arch, restored); err != nil {
			t.Fatalf("restore: %v", err)
		}
		v.check(t)
		if d := diffViews(want, treeView(t, dst)); d != "" {
			t.Errorf("the export differs from the merged view:\n%s\nchanges: %+v", d, changes)
		}
		wantUpper := treeView(t, upper)
		for p, e := range wantUpper {
			if e.kind == 'p' {
				delete(wantUpper, p)
			}
		}
		if d := diffViews(wantUpper, treeView(t, restored)); d != "" {
			t.Errorf("the restored archive differs from upper:\n%s", d)
		}
		for rel := range sparse {
			for _, root := range []string{dst, restored} {
				var st unix.Stat_t
				if unix.Lstat(filepath.Join(root, rel), &st) == nil && isRegStat(&st) && st.Blocks*512 > 1<<20 {
					t.Errorf("%s/%s: %d bytes on disk for one page of data", root, rel, st.Blocks*512)
				}
			}
		}
	})
}
