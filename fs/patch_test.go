package fs

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

var ptNumbers = func() string {
	var b strings.Builder
	for i := 1; i <= 40; i++ {
		fmt.Fprintf(&b, "line %d\n", i)
	}
	return b.String()
}()

// ptTextCase is the part of the round trip patch(1) can apply too: text
// added, modified and deleted, empty files, mode changes, missing final
// newlines, CRLF, renames, and names with spaces, tabs, newlines,
// quotes, backslashes, UTF-8, other bytes and escape sequences.
func ptTextCase() (lower, merged map[string]ptEntry) {
	edited := strings.Replace(strings.Replace(ptNumbers, "line 3\n", "line three\n", 1), "line 30\n", "", 1) + "line 41\n"
	lower = map[string]ptEntry{
		"keep.txt":            ptFile("same\n"),
		"numbers.txt":         ptFile(ptNumbers),
		"gone.txt":            ptFile("bye\n"),
		"gone-empty":          ptFile(""),
		"mode.sh":             ptFile("echo hi\n"),
		"unexec.sh":           ptExec("a\n"),
		"noeol.txt":           ptFile("a\nb"),
		"addeol.txt":          ptFile("x"),
		"crlf.txt":            ptFile("a\r\nb\r\nc\r\n"),
		"old/name.txt":        ptFile("moved\n"),
		"dir/deep/f.txt":      ptFile("deep\n"),
		"emptied.txt":         ptFile("content\n"),
		"filled.txt":          ptFile(""),
		"sp ace/na me.txt":    ptFile("spaced\n"),
		"x b/y a/z":           ptFile("fake split\n"),
		"ünï.txt":             ptFile("utf\n"),
		"tab\tin name.txt":    ptFile("tab\n"),
		"trailing space ":     ptFile("ts\n"),
		"-starts-with-dash":   ptFile("dash\n"),
		"blank-lines.txt":     ptFile("\n\n\na\n\n\n"),
		"formfeed.txt":        ptFile("a\fb\n"),
		"only-mode-and-text":  ptFile("1\n2\n"),
		"new\nline-name.txt":  ptFile("nl\n"),
		"quo\"te\\back.txt":   ptFile("q\n"),
		"\xff\xfe-latin1.txt": ptFile("bytes\n"),
	}
	merged = map[string]ptEntry{
		"keep.txt":            ptFile("same\n"),
		"numbers.txt":         ptFile(edited),
		"mode.sh":             ptExec("echo hi\n"),
		"unexec.sh":           ptFile("b\n"),
		"noeol.txt":           ptFile("a\nc"),
		"addeol.txt":          ptFile("x\n"),
		"crlf.txt":            ptFile("a\r\nB\r\nc\r\n"),
		"new/name.txt":        ptFile("moved\n"),
		"emptied.txt":         ptFile(""),
		"filled.txt":          ptFile("now\n"),
		"sp ace/na me.txt":    ptFile("spaced out\n"),
		"x b/y a/z":           ptFile("fake split 2\n"),
		"ünï.txt":             ptFile("utf-8 ✓\n"),
		"tab\tin name.txt":    ptFile("tabbed\n"),
		"trailing space ":     ptFile("ts2\n"),
		"-starts-with-dash":   ptFile("dash2\n"),
		"blank-lines.txt":     ptFile("\n\nb\n\n\n"),
		"formfeed.txt":        ptFile("a\fc\n"),
		"only-mode-and-text":  ptExec("1\n3\n"),
		"new\nline-name.txt":  ptFile("nl2\n"),
		"quo\"te\\back.txt":   ptFile("q2\n"),
		"\xff\xfe-latin1.txt": ptFile("bytes2\n"),
		"added.txt":           ptFile("hello\nworld\n"),
		"added-empty":         ptFile(""),
		"added-exec":          ptExec("#!/bin/sh\n"),
		"made/a/b/c.txt":      ptFile("nested\n"),
		"esc\x1b[31mname.txt": ptFile("escape in name\n"),
	}
	return lower, merged
}

// ptFullCase adds what only git apply applies: symlinks, type changes,
// binary files, text that is not safe to print, a file over the text
// size, and a file that became a directory and back.
func ptFullCase() (lower, merged map[string]ptEntry) {
	lower, merged = ptTextCase()
	bin := string([]byte{0, 1, 2, 3, 0xff, 0, 'b', 'i', 'n'})
	for p, e := range map[string]ptEntry{
		"link":         ptLink("target-one"),
		"link-gone":    ptLink("/nowhere"),
		"file2link":    ptFile("was a file\n"),
		"link2file":    ptLink("was-a-link"),
		"bin.dat":      ptFile(bin + strings.Repeat("x", 100)),
		"bin-gone.dat": ptFile(bin),
		"bin2text":     ptFile(bin),
		"text2bin":     ptFile("text\n"),
		"esc.txt":      ptFile("plain\n"),
		"f2d":          ptFile("file\n"),
		"d2f/x.txt":    ptFile("in dir\n"),
		"binmode":      ptFile(bin),
	} {
		lower[p] = e
	}
	for p, e := range map[string]ptEntry{
		"link":                ptLink("target-two"),
		"new-link":            ptLink("../outside/of/the tree"),
		"new-link-nl":         ptLink("a\nb"),
		"new-link-esc":        ptLink("\x1b]0;title\a"),
		"file2link":           ptLink("keep.txt"),
		"link2file":           ptFile("now a file\n"),
		"bin.dat":             ptFile(bin + strings.Repeat("y", 100)),
		"bin2text":            ptFile("text now\n"),
		"text2bin":            ptFile(bin),
		"esc.txt":             ptFile("plain\x1b[2J\n"),
		"bare-cr.txt":         ptFile("visible\rhidden\n"),
		"added-bin":           ptFile(strings.Repeat("\x00\x01", 5000)),
		"f2d/inner.txt":       ptFile("dir now\n"),
		"d2f":                 ptFile("file now\n"),
		"binmode":             ptExec(bin),
		"latin1-content.txt":  ptFile("caf\xe9\n"),
		"c1-content.txt":      ptFile("csi\u009b2J\n"),
		"\x1b[2Jesc-link":     ptLink("t"),
		"big-binary-over-cap": ptFile(strings.Repeat("0123456789abcdef\n", 4096)),
	} {
		merged[p] = e
	}
	return lower, merged
}

func TestWritePatchRoundTripGitApply(t *testing.T) {
	ptNeed(t, "git")
	lowerTree, merged := ptFullCase()
	lower, upper, changes := ptLayers(t, lowerTree, merged, false)
	// A small text limit sends big-binary-over-cap through the streamed
	// literal path.
	patch := ptWritePatch(t, lower, upper, changes, PatchOptions{MaxTextSize: 32 << 10})
	ptCompare(t, "git apply", ptRead(t, ptGitApply(t, lower, patch)), merged)
	ptCompare(t, "lower after WritePatch", ptRead(t, lower), lowerTree)
	for _, want := range []string{
		"diff --git a/big-binary-over-cap b/big-binary-over-cap\nnew file mode 100644\n",
		"GIT binary patch\nliteral 69632\n",
		"diff --git a/file2link b/file2link\ndeleted file mode 100644\n",
		"diff --git a/file2link b/file2link\nnew file mode 120000\n",
		"diff --git a/bin-gone.dat b/bin-gone.dat\ndeleted file mode 100644\nindex " + blobOID([]byte(lowerTree["bin-gone.dat"].data)) + ".." + zeroOID + "\nGIT binary patch\nliteral 0\nHcmV?d00001\n\n",
		"diff --git a/binmode b/binmode\nold mode 100644\nnew mode 100755\ndiff --git",
		"diff --git \"a/\\033[2Jesc-link\" \"b/\\033[2Jesc-link\"\nnew file mode 120000\n",
	} {
		if !bytes.Contains(patch, []byte(want)) {
			t.Errorf("patch lacks %q:\n%s", want, patch)
		}
	}
}

func TestWritePatchRoundTripPatchP1(t *testing.T) {
	ptNeed(t, "patch")
	lowerTree, merged := ptTextCase()
	lower, upper, changes := ptLayers(t, lowerTree, merged, false)
	patch := ptWritePatch(t, lower, upper, changes, PatchOptions{})
	if bytes.Contains(patch, []byte("GIT binary patch")) {
		t.Fatalf("the text case has a binary hunk:\n%s", patch)
	}
	ptCompare(t, "patch -p1", ptRead(t, ptPatchApply(t, lower, patch)), merged)
}

// With a real upper layer (whiteouts for deletions) and the change list
// from Diff.
func TestWritePatchRoundTripFromDiff(t *testing.T) {
	ptNeed(t, "git")
	lowerTree, merged := ptFullCase()
	lower, upper, _ := ptLayers(t, lowerTree, merged, true)
	changes, err := Diff(lower, upper)
	if err != nil {
		t.Fatal(err)
	}
	patch := ptWritePatch(t, lower, upper, changes, PatchOptions{})
	ptCompare(t, "git apply", ptRead(t, ptGitApply(t, lower, patch)), merged)
}

// For text changes and symlinks the patch is byte for byte what git
// diff writes.
func TestWritePatchMatchesGitDiff(t *testing.T) {
	ptNeed(t, "git")
	lowerTree, merged := ptTextCase()
	for p, e := range map[string]ptEntry{"link": ptLink("one"), "link-gone": ptLink("x")} {
		lowerTree[p] = e
	}
	for p, e := range map[string]ptEntry{"link": ptLink("two"), "link-new": ptLink("a b")} {
		merged[p] = e
	}
	lower, upper, changes := ptLayers(t, lowerTree, merged, false)
	got := ptWritePatch(t, lower, upper, changes, PatchOptions{})

	// A repository whose commit is lower and whose index is merged.
	repo := t.TempDir()
	ptWrite(t, repo, lowerTree)
	for _, args := range [][]string{{"init", "-q"}, {"add", "-A"}, {"-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "lower"}} {
		if out, err := ptGit(repo, nil, args...); err != nil {
			t.Fatalf("git %v: %v %s", args, err, out)
		}
	}
	for p := range lowerTree {
		if err := os.Remove(filepath.Join(repo, p)); err != nil {
			t.Fatal(err)
		}
	}
	ptWrite(t, repo, merged)
	if out, err := ptGit(repo, nil, "add", "-A"); err != nil {
		t.Fatalf("git add: %v %s", err, out)
	}
	want, err := ptGit(repo, nil, "diff", "--cached", "--no-renames", "--full-index", "--binary", "--no-color", "--no-ext-diff")
	if err != nil {
		t.Fatalf("git diff: %v %s", err, want)
	}
	// git sorts paths bytewise as the change list is; the function
	// context git adds after a hunk header's "@@" is not written.
	wantLines := strings.Split(string(want), "\n")
	for i, l := range wantLines {
		if strings.HasPrefix(l, "@@ ") {
			wantLines[i] = l[:strings.Index(l[3:], "@@")+5]
		}
	}
	// A name ending in a space is quoted, for patch(1).
	w := strings.NewReplacer("a/trailing space  b/trailing space \n", `"a/trailing space " "b/trailing space "`+"\n",
		"--- a/trailing space \t", `--- "a/trailing space "`+"\t", "+++ b/trailing space \t", `+++ "b/trailing space "`+"\t",
	).Replace(strings.Join(wantLines, "\n"))
	if string(got) != w {
		t.Errorf("patch differs from git diff's\n--- ours\n%s\n--- git's\n%s", got, w)
	}
}

func TestWritePatchUnchangedToGit(t *testing.T) {
	lower, upper := t.TempDir(), t.TempDir()
	ptWrite(t, lower, map[string]ptEntry{"f": ptFile("x\n")})
	ptWrite(t, upper, map[string]ptEntry{"f": ptFile("x\n")})
	if err := os.Chmod(filepath.Join(upper, "f"), 0o600); err != nil { // bits git does not keep
		t.Fatal(err)
	}
	patch := ptWritePatch(t, lower, upper, []Change{{Path: "f", Kind: Modified}, {Path: "d", Kind: Added, Dir: true}}, PatchOptions{})
	if len(patch) != 0 {
		t.Errorf("patch of a change git cannot see: %q", patch)
	}
}

func TestWritePatchLeavesOutGitDirectories(t *testing.T) {
	lower, upper := t.TempDir(), t.TempDir()
	ptWrite(t, upper, map[string]ptEntry{".git/hooks/pre-commit": ptExec("evil\n"), "sub/.GIT/config": ptFile("x\n"), "ok.txt": ptFile("ok\n")})
	changes := []Change{{Path: ".git/hooks/pre-commit", Kind: Added}, {Path: "ok.txt", Kind: Added}, {Path: "sub/.GIT/config", Kind: Added}}
	patch := ptWritePatch(t, lower, upper, changes, PatchOptions{})
	want := "# tent: 2 changed path(s) in .git directories are not in this patch\n" +
		"diff --git a/ok.txt b/ok.txt\nnew file mode 100644\nindex " + zeroOID + ".." + blobOID([]byte("ok\n")) + "\n--- /dev/null\n+++ b/ok.txt\n@@ -0,0 +1 @@\n+ok\n"
	if string(patch) != want {
		t.Errorf("patch\n%s\nwant\n%s", patch, want)
	}
}

func TestGitQuote(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"plain.txt", "a/plain.txt"},
		{"sp ace", "a/sp ace"},
		{"trailing ", `"a/trailing "`},
		{"tab\there", `"a/tab\there"`},
		{"new\nline", `"a/new\nline"`},
		{`quo"te`, `"a/quo\"te"`},
		{`back\slash`, `"a/back\\slash"`},
		{"\a\b\v\f\r", `"a/\a\b\v\f\r"`},
		{"\x01\x1b\x7f", `"a/\001\033\177"`},
		{"caf\xc3\xa9", `"a/caf\303\251"`},
		{"\xff", `"a/\377"`},
	} {
		if got := gitQuote("a/", c.in); got != c.want {
			t.Errorf("gitQuote(%q) = %s, want %s", c.in, got, c.want)
		}
	}
}

func TestIsSafeText(t *testing.T) {
	for _, c := range []struct {
		in   string
		want bool
	}{
		{"", true}, {"a\tb\n", true}, {"crlf\r\n", true}, {"form\ffeed\n", true}, {"ütf-8 ✓\n", true},
		{"nul\x00", false}, {"esc\x1b[31m", false}, {"bare\rcr\n", false}, {"cr at end\r", false},
		{"bs\b", false}, {"del\x7f", false}, {"latin1 caf\xe9", false}, {"c1 \u009b", false}, {"bell\a", false},
	} {
		if got := isSafeText([]byte(c.in)); got != c.want {
			t.Errorf("isSafeText(%q) = %v, want %v", c.in, got, c.want)
		}
	}
}
