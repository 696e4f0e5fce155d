package layer

import (
	"bufio"
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// The memory tests run WritePatch in a child copy of the test binary and
// read the child's peak resident set (VmHWM, which counts everything the
// process touched, not only the Go heap), as the child reports it for
// its own memory: wait4's ru_maxrss would not do, since Linux carries the
// parent's peak into a child that execs after a vfork-style clone (as Go
// starts processes), so a test binary grown by earlier tests failed them.

const ptMemChildEnv = "TENT_PATCH_MEM_CHILD"

// TestPatchMemChild is the child: it writes the patch of one Modified
// path to a file and exits. It does nothing in a normal test run.
func TestPatchMemChild(t *testing.T) {
	args := os.Getenv(ptMemChildEnv)
	if args == "" {
		t.Skip("the child of the WritePatch memory tests")
	}
	f := strings.Split(args, "\n") // lower, upper, path, out
	out, err := os.Create(f[3])
	if err != nil {
		t.Fatal(err)
	}
	defer out.Close()
	if err := WritePatch(out, f[0], f[1], []Change{{Path: f[2], Kind: Modified}}); err != nil {
		t.Fatal(err)
	}
	status, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(status), "\n") {
		if kb, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			if err := os.WriteFile(f[3]+".hwm", []byte(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(kb), "kB"))), 0o600); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// ptPatchInChild writes the patch of path in a child and returns it (as
// a file) and the child's peak RSS in bytes.
func ptPatchInChild(t *testing.T, lower, upper, path string) (string, int64) {
	t.Helper()
	out := filepath.Join(t.TempDir(), "patch")
	cmd := exec.Command(os.Args[0], "-test.run=^TestPatchMemChild$", "-test.count=1")
	cmd.Dir = t.TempDir()
	cmd.Env = append(os.Environ(), ptMemChildEnv+"="+strings.Join([]string{lower, upper, path, out}, "\n"), "GOGC=100", "GOMEMLIMIT=off")
	if msg, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("child: %v\n%s", err, msg)
	}
	b, err := os.ReadFile(out + ".hwm")
	if err != nil {
		t.Fatalf("the child's peak RSS: %v", err)
	}
	kb, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil {
		t.Fatalf("the child's peak RSS %q: %v", b, err)
	}
	return out, kb << 10
}

func ptSparse(t *testing.T, path string, size int64, marks map[int64]string) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := f.Truncate(size); err != nil {
		t.Fatal(err)
	}
	for off, s := range marks {
		if _, err := f.WriteAt([]byte(s), off); err != nil {
			t.Fatal(err)
		}
	}
}

func ptFileOID(t *testing.T, path string) string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	fi, _ := f.Stat()
	h := sha1.New()
	fmt.Fprintf(h, "blob %d\x00", fi.Size())
	if _, err := io.Copy(h, f); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// A 256 MiB sparse file, modified in one byte, is streamed as a binary
// literal: the child's peak RSS stays far below the file's size, and git
// apply turns the lower file into the upper one.
func TestWritePatchMemorySparse256MiB(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector multiplies memory: the bound is checked in the run without it")
	}
	if testing.Short() {
		t.Skip("reads 1 GiB of holes")
	}
	const size = 256 << 20
	lower, upper := t.TempDir(), t.TempDir()
	ptSparse(t, filepath.Join(lower, "disk.img"), size, nil)
	ptSparse(t, filepath.Join(upper, "disk.img"), size, map[int64]string{size / 2: "x", size - 1: "y"})
	patchFile, rss := ptPatchInChild(t, lower, upper, "disk.img")
	t.Logf("peak RSS of WritePatch for a %d MiB sparse file: %.1f MiB", size>>20, float64(rss)/(1<<20))
	if rss > 48<<20 {
		t.Errorf("peak RSS %d bytes, want at most 48 MiB", rss)
	}

	pf, err := os.Open(patchFile)
	if err != nil {
		t.Fatal(err)
	}
	defer pf.Close()
	var head []string
	sc := bufio.NewScanner(pf)
	for len(head) < 4 && sc.Scan() {
		head = append(head, sc.Text())
	}
	want := []string{"diff --git a/disk.img b/disk.img",
		"index " + ptFileOID(t, filepath.Join(lower, "disk.img")) + ".." + ptFileOID(t, filepath.Join(upper, "disk.img")) + " 100644",
		"GIT binary patch", fmt.Sprintf("literal %d", size)}
	if strings.Join(head, "\n") != strings.Join(want, "\n") {
		t.Fatalf("patch starts\n%s\nwant\n%s", strings.Join(head, "\n"), strings.Join(want, "\n"))
	}
	if _, err := exec.LookPath("git"); err != nil {
		return
	}
	patch, err := os.ReadFile(patchFile)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("patch size: %d bytes", len(patch))
	applied := ptGitApply(t, lower, patch)
	if got, want := ptFileOID(t, filepath.Join(applied, "disk.img")), ptFileOID(t, filepath.Join(upper, "disk.img")); got != want {
		t.Errorf("git apply made blob %s, want %s", got, want)
	}
}

// The largest text pair the defaults diff (16 MiB and 1 Mi distinct lines
// on each side, no line in common) stays within the documented bound.
func TestWritePatchMemoryLargestText(t *testing.T) {
	if raceEnabled {
		t.Skip("the race detector multiplies memory: the bound is checked in the run without it")
	}
	if testing.Short() {
		t.Skip("diffs 32 MiB of text")
	}
	lower, upper := t.TempDir(), t.TempDir()
	for _, side := range []struct {
		dir    string
		format string
	}{{lower, "old %011d\n"}, {upper, "new %011d\n"}} {
		f, err := os.Create(filepath.Join(side.dir, "big.txt"))
		if err != nil {
			t.Fatal(err)
		}
		w := bufio.NewWriter(f)
		for i := 0; i < DefaultMaxTextLines; i++ {
			fmt.Fprintf(w, side.format, i)
		}
		if err := w.Flush(); err != nil {
			t.Fatal(err)
		}
		f.Close()
	}
	patchFile, rss := ptPatchInChild(t, lower, upper, "big.txt")
	t.Logf("peak RSS of WritePatch for two %d MiB texts of %d lines: %.1f MiB", DefaultMaxTextSize>>20, DefaultMaxTextLines, float64(rss)/(1<<20))
	bound := int64(2*DefaultMaxTextSize+56*DefaultMaxTextLines) + 16<<20 // + the runtime's own
	if rss > bound {
		t.Errorf("peak RSS %d bytes, want at most %d", rss, bound)
	}
	fi, err := os.Stat(patchFile)
	if err != nil {
		t.Fatal(err)
	}
	// A text hunk: every old line deleted, every new one added.
	if want := int64(2 * (DefaultMaxTextSize + DefaultMaxTextLines)); fi.Size() < want {
		t.Errorf("patch of %d bytes, want a text patch of at least %d", fi.Size(), want)
	}
}
