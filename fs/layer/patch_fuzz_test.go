package layer

import (
	"bytes"
	"strings"
	"testing"
)

// Flags of FuzzWritePatch's input.
const (
	fzOld     = 1 << iota // the path is in lower
	fzNew                 // the path is in upper
	fzOldLink             // ... as a symlink (content is the target)
	fzNewLink
	fzOldExec
	fzNewExec
	fzInDir // the path is dir/NAME
)

// fzName makes a fuzzed name a file name git apply accepts anywhere: no
// slash or NUL, not ".", "..", nor (by git's verify_path, NTFS rules
// included) anything like ".git", "git~1" or a .gitmodules symlink.
func fzName(b []byte) string {
	s := strings.NewReplacer("/", "_", "\x00", "_", "~", "-").Replace(string(b))
	if len(s) > 200 {
		s = s[:200]
	}
	if s == "" || s[0] == '.' {
		s = "f" + s
	}
	if s == "zz-fixed.txt" {
		s += "-2"
	}
	return s
}

func fzEntry(content []byte, link, exec bool) ptEntry {
	if link {
		target := strings.ReplaceAll(string(content), "\x00", "_")
		if target == "" {
			target = "t"
		}
		if len(target) > 4000 {
			target = target[:4000]
		}
		return ptLink(target)
	}
	return ptEntry{data: string(content), exec: exec}
}

// FuzzWritePatch writes the patch of one fuzzed path (any name, any
// content, file or symlink, either side present, any execute bit) beside
// a fixed modified file, checks that every line of it is inert (see
// ptCheckInert), applies it with git apply to a copy of lower and
// compares the result with the expected tree.
func FuzzWritePatch(f *testing.F) {
	f.Add([]byte("a.txt"), []byte("one\ntwo\n"), []byte("one\n2\n"), byte(fzOld|fzNew))
	f.Add([]byte("new\nline \x1b[31m\xff"), []byte(""), []byte("x"), byte(fzNew|fzNewExec))
	f.Add([]byte("bin"), []byte("\x00\x01\x02"), []byte("\x00\x01\x03"), byte(fzOld|fzNew|fzInDir))
	f.Add([]byte("link"), []byte("target"), []byte("other\ttarget"), byte(fzOld|fzNew|fzOldLink|fzNewLink))
	f.Add([]byte("typechange"), []byte("file\n"), []byte("../up"), byte(fzOld|fzNew|fzNewLink))
	f.Add([]byte("mode"), []byte("same\n"), []byte("same\n"), byte(fzOld|fzNew|fzNewExec))
	f.Add([]byte("gone \"q\" \\"), []byte("bye\r\nno eol"), []byte(""), byte(fzOld|fzOldExec))
	f.Add([]byte("empty"), []byte(""), []byte(""), byte(fzNew))
	f.Fuzz(func(t *testing.T, name, old, new []byte, flags byte) {
		ptNeed(t, "git")
		p := fzName(name)
		if flags&fzInDir != 0 {
			p = "dir/" + p
		}
		lowerTree := map[string]ptEntry{"zz-fixed.txt": ptFile("a\nb\n")}
		merged := map[string]ptEntry{"zz-fixed.txt": ptFile("a\nc\n")}
		if flags&fzOld != 0 {
			lowerTree[p] = fzEntry(old, flags&fzOldLink != 0, flags&fzOldExec != 0)
		}
		if flags&fzNew != 0 {
			merged[p] = fzEntry(new, flags&fzNewLink != 0, flags&fzNewExec != 0)
		}
		lower, upper, changes := ptLayers(t, lowerTree, merged, false)
		patch := ptWritePatch(t, lower, upper, changes, PatchOptions{MaxTextSize: 64})
		if !bytes.Contains(patch, []byte("diff --git a/zz-fixed.txt b/zz-fixed.txt\n")) {
			t.Fatalf("the fixed file is missing:\n%s", patch)
		}
		ptCompare(t, "git apply", ptRead(t, ptGitApply(t, lower, patch)), merged)
	})
}
