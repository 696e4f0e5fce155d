//go:build linux

package layer

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math"
	"strings"
)

// Default limits of [WritePatch] (see [PatchOptions]).
const (
	DefaultMaxTextSize  = 16 << 20
	DefaultMaxTextLines = 1 << 20
	DefaultMaxFileSize  = 1 << 30
)

// PatchOptions bound the memory and work of [WritePatchOptions]. A zero
// field takes its default.
//
// Memory: a text pair costs both contents plus at most 28 bytes per line
// of each (line starts, line ids, the line table, the diff's marks), so
// at most about 2*MaxTextSize + 56*MaxTextLines bytes: 88 MiB with the
// defaults (a child process diffing two 16 MiB texts of 1 Mi distinct
// lines peaked at 90 MiB RSS). Binary literals and the hashes of big
// files stream through fixed buffers and a zlib writer whatever the
// file's size (a 256 MiB sparse file: 8 MiB RSS). The line diff's time
// is bounded too, by a budget of steps linear in the number of lines.
type PatchOptions struct {
	// MaxTextSize is the largest file (bytes) diffed as text; larger
	// files are written as git binary literals, streamed. Default
	// DefaultMaxTextSize (16 MiB).
	MaxTextSize int64
	// MaxTextLines is the most lines a file diffed as text may have;
	// files with more are written as binary literals. Default
	// DefaultMaxTextLines (1 Mi lines).
	MaxTextLines int
	// MaxFileSize is the largest file a patch may carry (git apply holds
	// each file in memory): a larger added or modified file fails with
	// ErrNotExportable. The old side is only hashed, so it has no limit.
	// Default DefaultMaxFileSize (1 GiB).
	MaxFileSize int64
}

func (o PatchOptions) withDefaults() PatchOptions {
	if o.MaxTextSize <= 0 {
		o.MaxTextSize = DefaultMaxTextSize
	}
	if o.MaxTextLines <= 0 {
		o.MaxTextLines = DefaultMaxTextLines
	}
	if o.MaxFileSize <= 0 {
		o.MaxFileSize = DefaultMaxFileSize
	}
	if o.MaxTextSize > o.MaxFileSize {
		o.MaxTextSize = o.MaxFileSize
	}
	return o
}

// WritePatch writes changes (as listed by [Diff] for lower and upper) as
// a patch in git's extended diff format, to apply in the lower
// directory: `git apply` applies all of it; `patch -p1` applies the text
// changes, deletions and mode changes but neither binary literals nor
// symlinks. It uses the default [PatchOptions].
func WritePatch(w io.Writer, lower, upper string, changes []Change) error {
	return WritePatchOptions(w, lower, upper, changes, PatchOptions{})
}

// WritePatchOptions is [WritePatch] with explicit limits.
//
// The patch holds, per changed path: "diff --git a/P b/P" (names quoted
// as git does, so no name can forge a line or carry a control byte);
// "new file mode", "deleted file mode" or "old mode"/"new mode" (git
// keeps 100644, 100755 and 120000 for symlinks); a full "index" line
// (SHA-1 blob names); then unified hunks with 3 lines of context, or for
// a file that is not printable text or is over the text limits a "GIT
// binary patch" with a zlib+base85 "literal" of the new content. A
// symlink's content is its target. A change of type (file to symlink)
// and a rename are a deletion and an addition. Directories are not in a
// patch: an added empty directory is lost, an emptied one stays (git
// removes it). Paths with a ".git" component are left out, counted in a
// leading "# tent:" comment: git apply refuses them and patch(1) would
// plant hooks.
//
// Both trees are read only beneath directory fds held on lower and
// upper, with openat2(RESOLVE_BENEATH|RESOLVE_NO_SYMLINKS|
// RESOLVE_NO_MAGICLINKS): no symlink is followed, not even as a parent
// directory. Every path is checked before anything is written: a FIFO,
// socket or device, or a new file over MaxFileSize, fails with an error
// wrapping [ErrNotExportable] and naming it. A file that changes while it
// is read fails with [ErrFileChanged] (export from a paused sandbox); an
// error after output began ends the output with a line git apply
// rejects, so git never applies a truncated patch in part.
func WritePatchOptions(w io.Writer, lower, upper string, changes []Change, opts PatchOptions) error {
	opts = opts.withDefaults()
	lo, err := openPatchRoot(lower, "a/")
	if err != nil {
		return err
	}
	defer lo.close()
	up, err := openPatchRoot(upper, "b/")
	if err != nil {
		return err
	}
	defer up.close()
	p := &patcher{w: bufio.NewWriterSize(w, 64<<10), lower: lo, upper: up, opts: opts}

	var todo []Change
	skipped := 0
	for _, c := range changes {
		if !validPatchPath(c.Path) {
			return fmt.Errorf("patch: invalid change path %s", gitQuote("", c.Path))
		}
		if c.Kind != Added && c.Kind != Modified && c.Kind != Deleted {
			return fmt.Errorf("patch: %s: unknown change kind %s", gitQuote("", c.Path), gitQuote("", string(c.Kind)))
		}
		if c.Dir {
			continue
		}
		if inGitDir(c.Path) {
			skipped++
			continue
		}
		if err := p.check(c); err != nil {
			return err
		}
		todo = append(todo, c)
	}
	if skipped > 0 {
		fmt.Fprintf(p.w, "# tent: %d changed path(s) in .git directories are not in this patch\n", skipped)
	}
	for _, c := range todo {
		if err := p.change(c); err != nil {
			p.w.WriteString("\n# tent: incomplete patch, do not apply: " + gitQuote("", err.Error()) + "\n@@ -1 +1 @@\n")
			p.w.Flush()
			return err
		}
	}
	if err := p.w.Flush(); err != nil {
		return fmt.Errorf("patch: failed to write: %w", err)
	}
	return nil
}

type patcher struct {
	w            *bufio.Writer
	lower, upper *patchRoot
	opts         PatchOptions
}

// sides says which trees a change reads: lower for the old content
// unless added, upper for the new unless deleted.
func sides(c Change) (old, new bool) { return c.Kind != Added, c.Kind != Deleted }

// check looks at both sides of c, without reading contents, so that an
// unexportable path fails before any output.
func (p *patcher) check(c Change) error {
	readOld, readNew := sides(c)
	if readOld {
		if err := p.lower.check(c.Path, math.MaxInt64); err != nil {
			return err
		}
	}
	if readNew {
		if err := p.upper.check(c.Path, p.opts.MaxFileSize); err != nil {
			return err
		}
	}
	return nil
}

func (p *patcher) change(c Change) error {
	readOld, readNew := sides(c)
	var old, new patchSide
	var err error
	if readOld {
		if old, err = p.lower.load(c.Path, p.opts.MaxTextSize, math.MaxInt64); err != nil {
			return err
		}
		defer old.close()
	}
	if readNew {
		if new, err = p.upper.load(c.Path, p.opts.MaxTextSize, p.opts.MaxFileSize); err != nil {
			return err
		}
		defer new.close()
		if !new.present {
			return fmt.Errorf("%s disappeared: %w", p.upper.name(c.Path), ErrFileChanged)
		}
	}
	if old.present && new.present && (old.mode == "120000") != (new.mode == "120000") {
		if err := p.section(c.Path, old, patchSide{}); err != nil {
			return err
		}
		return p.section(c.Path, patchSide{}, new)
	}
	return p.section(c.Path, old, new)
}

// text returns s's lines when it can be printed as hunks.
func (p *patcher) text(s patchSide) (lines, bool) {
	if !s.present {
		return splitLines(nil), true
	}
	if s.big || !isSafeText(s.data) {
		return lines{}, false
	}
	n := bytes.Count(s.data, []byte{'\n'})
	if len(s.data) > 0 && s.data[len(s.data)-1] != '\n' {
		n++
	}
	if n > p.opts.MaxTextLines {
		return lines{}, false
	}
	return splitLines(s.data), true
}

// oid is the git blob name of s's content, streamed for a big file.
func (p *patcher) oid(s patchSide, name string) (string, error) {
	switch {
	case !s.present:
		return zeroOID, nil
	case s.big:
		return streamOID(s.file, s.size, name)
	}
	return blobOID(s.data), nil
}

// section writes one "diff --git" section turning old into new (either
// may be absent, not both).
func (p *patcher) section(rel string, old, new patchSide) error {
	if !old.present && !new.present {
		return nil
	}
	oldName, newName := p.lower.name(rel), p.upper.name(rel)
	oldOID, err := p.oid(old, oldName)
	if err != nil {
		return err
	}
	newOID, err := p.oid(new, newName)
	if err != nil {
		return err
	}
	if old.present && new.present && old.mode == new.mode && oldOID == newOID {
		return nil // nothing git can see changed (owner, other mode bits, times)
	}
	w := p.w
	fmt.Fprintf(w, "diff --git %s %s\n", oldName, newName)
	switch {
	case !old.present:
		fmt.Fprintf(w, "new file mode %s\n", new.mode)
	case !new.present:
		fmt.Fprintf(w, "deleted file mode %s\n", old.mode)
	case old.mode != new.mode:
		fmt.Fprintf(w, "old mode %s\nnew mode %s\n", old.mode, new.mode)
	}
	if oldOID == newOID {
		return nil // a mode change only
	}
	fmt.Fprintf(w, "index %s..%s", oldOID, newOID)
	if old.present && new.present && old.mode == new.mode {
		fmt.Fprintf(w, " %s", old.mode)
	}
	w.WriteByte('\n')

	a, aText := p.text(old)
	b, bText := p.text(new)
	if aText && bText {
		if a.n() == 0 && b.n() == 0 {
			return nil // an empty file added or deleted: the header says it all
		}
		minus, plus := "/dev/null", "/dev/null"
		if old.present {
			minus = oldName
		}
		if new.present {
			plus = newName
		}
		fmt.Fprintf(w, "--- %s%s\n+++ %s%s\n", minus, labelTab(minus), plus, labelTab(plus))
		writeHunks(w, a, b)
		return nil
	}
	w.WriteString("GIT binary patch\n")
	if !new.present {
		return writeLiteral(w, bytes.NewReader(nil), 0, emptyOID, newName)
	}
	var r io.ReaderAt = new.file
	if !new.big {
		r = bytes.NewReader(new.data)
	}
	return writeLiteral(w, r, new.size, newOID, newName)
}

// labelTab is the tab git puts after a ---/+++ name that holds a space,
// so that patch(1) reads the whole name.
func labelTab(label string) string {
	if strings.Contains(label, " ") {
		return "\t"
	}
	return ""
}
