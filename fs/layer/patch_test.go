package layer

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

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
