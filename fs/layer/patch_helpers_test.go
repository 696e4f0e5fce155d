package layer

// Helpers of the WritePatch tests: test trees, layers, git and patch(1).

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"unicode/utf8"

	"golang.org/x/sys/unix"
)

// ptEntry is a non-directory entry of a test tree: a regular file (with
// its owner-execute bit) or a symlink.
type ptEntry struct {
	link bool
	data string // content, or the symlink's target
	exec bool
}

func ptFile(s string) ptEntry { return ptEntry{data: s} }
func ptExec(s string) ptEntry { return ptEntry{data: s, exec: true} }
func ptLink(s string) ptEntry { return ptEntry{link: true, data: s} }

func (e ptEntry) String() string {
	switch {
	case e.link:
		return fmt.Sprintf("symlink -> %q", e.data)
	case e.exec:
		return fmt.Sprintf("executable %q", e.data)
	}
	return fmt.Sprintf("file %q", e.data)
}

// ptWrite creates the entries beneath root, with their parents.
func ptWrite(t testing.TB, root string, tree map[string]ptEntry) {
	t.Helper()
	for p, e := range tree {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if e.link {
			if err := os.Symlink(e.data, full); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mode := os.FileMode(0o644)
		if e.exec {
			mode = 0o755
		}
		if err := os.WriteFile(full, []byte(e.data), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(full, mode); err != nil {
			t.Fatal(err)
		}
	}
}

// ptRead is the tree beneath root as git sees it: files with content and
// owner-execute bit, symlinks with targets; directories only hold them.
// A .git directory at the top is skipped.
func ptRead(t testing.TB, root string) map[string]ptEntry {
	t.Helper()
	out := map[string]ptEntry{}
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if d.IsDir() {
			if rel == ".git" {
				return filepath.SkipDir
			}
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		switch {
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = ptLink(target)
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			out[filepath.ToSlash(rel)] = ptEntry{data: string(b), exec: fi.Mode()&0o100 != 0}
		default:
			return fmt.Errorf("unexpected %s: %v", p, fi.Mode())
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// ptCompare fails the test for every difference between got and want.
func ptCompare(t testing.TB, what string, got, want map[string]ptEntry) {
	t.Helper()
	var keys []string
	for p := range want {
		keys = append(keys, p)
	}
	for p := range got {
		if _, ok := want[p]; !ok {
			keys = append(keys, p)
		}
	}
	sort.Strings(keys)
	for _, p := range keys {
		g, inGot := got[p]
		w, inWant := want[p]
		switch {
		case !inGot:
			t.Errorf("%s: %q missing, want %v", what, p, w)
		case !inWant:
			t.Errorf("%s: %q is %v, want nothing", what, p, g)
		case g != w:
			t.Errorf("%s: %q is %v, want %v", what, p, g, w)
		}
	}
}

// ptLayers builds a lower directory and an upper layer holding what
// changed from lower to merged, and lists the changes as Diff would
// (files of deleted directories listed; directories need not be). With
// whiteouts, deleted paths get overlay whiteouts (char 0/0) in upper as
// the kernel makes them.
func ptLayers(t testing.TB, lowerTree, merged map[string]ptEntry, whiteouts bool) (lower, upper string, changes []Change) {
	t.Helper()
	lower, upper = t.TempDir(), t.TempDir()
	ptWrite(t, lower, lowerTree)
	up := map[string]ptEntry{}
	for p, e := range merged {
		old, ok := lowerTree[p]
		switch {
		case !ok:
			changes = append(changes, Change{Path: p, Kind: Added})
		case old != e:
			changes = append(changes, Change{Path: p, Kind: Modified})
		default:
			continue
		}
		up[p] = e
	}
	ptWrite(t, upper, up)
	for p := range lowerTree {
		if _, ok := merged[p]; ok {
			continue
		}
		changes = append(changes, Change{Path: p, Kind: Deleted})
		if !whiteouts {
			continue
		}
		full := filepath.Join(upper, p)
		if fi, err := os.Lstat(filepath.Dir(full)); err == nil && !fi.IsDir() {
			continue // in a directory that became a file: hidden by it
		}
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if fi, err := os.Lstat(full); err == nil && fi.IsDir() {
			continue // a file that became a directory: nothing to white out
		}
		if err := unix.Mknod(full, unix.S_IFCHR, 0); err != nil {
			if errors.Is(err, unix.EPERM) {
				t.Skip("creating a whiteout needs CAP_MKNOD")
			}
			t.Fatal(err)
		}
	}
	sort.Slice(changes, func(i, j int) bool { return changes[i].Path < changes[j].Path })
	return lower, upper, changes
}

// ptCopy copies a tree with cp -a (holes, modes and symlinks kept) into
// a new temporary directory.
func ptCopy(t testing.TB, src string) string {
	t.Helper()
	dst := t.TempDir()
	cmd := exec.Command("cp", "-a", "--", src+"/.", dst)
	cmd.Dir = dst
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("cp -a: %v %s", err, out)
	}
	return dst
}

func ptNeed(t testing.TB, tool string) {
	t.Helper()
	if _, err := exec.LookPath(tool); err != nil {
		t.Skipf("no %s on this host (scripts/setup installs it)", tool)
	}
}

// ptGit runs git in dir (always a test's temporary directory) with no
// user or system configuration and no repository above dir.
func ptGit(dir string, stdin []byte, args ...string) ([]byte, error) {
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Stdin = bytes.NewReader(stdin)
	cmd.Env = append(os.Environ(), "GIT_CONFIG_NOSYSTEM=1", "GIT_CONFIG_GLOBAL=/dev/null", "HOME="+dir,
		"GIT_CEILING_DIRECTORIES="+filepath.Dir(dir), "LC_ALL=C")
	return cmd.CombinedOutput()
}

// ptGitApply applies patch in a copy of lower with git apply and returns
// the copy.
func ptGitApply(t testing.TB, lower string, patch []byte) string {
	t.Helper()
	dir := ptCopy(t, lower)
	if out, err := ptGit(dir, patch, "apply", "--whitespace=nowarn", "-"); err != nil {
		t.Fatalf("git apply: %v\n%s\npatch:\n%s", err, out, patch)
	}
	return dir
}

// ptPatchApply applies patch in a copy of lower with patch -p1.
func ptPatchApply(t testing.TB, lower string, patch []byte) string {
	t.Helper()
	dir := ptCopy(t, lower)
	cmd := exec.Command("patch", "-p1", "--batch", "--force", "--silent")
	cmd.Dir, cmd.Stdin = dir, bytes.NewReader(patch)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("patch -p1: %v\n%s\npatch:\n%s", err, out, patch)
	}
	return dir
}

// ptCheckInert fails unless every line of patch is one of a patch's line
// kinds and no line carries a byte a terminal would act on: only
// printable ASCII in headers (and a tab after a ---/+++ name), and in
// hunk lines printable UTF-8 plus tab, form feed and a CR before the
// newline.
func ptCheckInert(t testing.TB, patch []byte) {
	t.Helper()
	if len(patch) == 0 {
		return
	}
	if patch[len(patch)-1] != '\n' {
		t.Fatalf("patch does not end with a newline")
	}
	headers := []string{"diff --git ", "new file mode ", "deleted file mode ", "old mode ", "new mode ",
		"index ", "--- ", "+++ ", "@@ -", "GIT binary patch", "literal ", "# tent: ", "\\ No newline at end of file"}
	inBinary := false
	for n, line := range strings.Split(string(patch[:len(patch)-1]), "\n") {
		bad := func(why string) { t.Fatalf("line %d %q: %s", n+1, line, why) }
		switch {
		case line == "":
			if !inBinary {
				bad("empty line outside a binary hunk")
			}
			inBinary = false
			continue
		case inBinary && !strings.HasPrefix(line, "literal "):
			if c := line[0]; !(c >= 'A' && c <= 'Z' || c >= 'a' && c <= 'z') || (len(line)-1)%5 != 0 {
				bad("not a base85 line")
			}
			for _, c := range []byte(line[1:]) {
				if strings.IndexByte(base85Alphabet, c) < 0 {
					bad("byte outside base85")
				}
			}
			continue
		case line[0] == ' ' || line[0] == '+' && !strings.HasPrefix(line, "+++ ") || line[0] == '-' && !strings.HasPrefix(line, "--- "):
			body := strings.TrimSuffix(line[1:], "\r")
			if !utf8.ValidString(body) {
				bad("invalid UTF-8 in a hunk line")
			}
			for _, r := range body {
				if r < 0x20 && r != '\t' && r != '\f' || r >= 0x7f && r <= 0x9f {
					bad(fmt.Sprintf("control character %U in a hunk line", r))
				}
			}
			continue
		}
		ok := false
		for _, h := range headers {
			ok = ok || strings.HasPrefix(line, h)
		}
		if !ok {
			bad("not a patch line")
		}
		if line == "GIT binary patch" {
			inBinary = true
		}
		body := line
		if strings.HasPrefix(line, "--- ") || strings.HasPrefix(line, "+++ ") {
			body = strings.TrimSuffix(line, "\t")
		}
		for _, c := range []byte(body) {
			if c < 0x20 || c >= 0x7f {
				bad(fmt.Sprintf("byte %#x in a header", c))
			}
		}
	}
}

func ptWritePatch(t testing.TB, lower, upper string, changes []Change, opts PatchOptions) []byte {
	t.Helper()
	var out bytes.Buffer
	if err := WritePatchOptions(&out, lower, upper, changes, opts); err != nil {
		t.Fatalf("WritePatch: %v\n%s", err, out.Bytes())
	}
	ptCheckInert(t, out.Bytes())
	return out.Bytes()
}
