package files

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"maps"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// runHelper runs the file helper in this process and returns its exit
// code, stdout and stderr.
func runHelper(args []string, stdin io.Reader) (int, string, string) {
	var stdout, stderr bytes.Buffer
	code := RunFileHelper(args, stdin, &stdout, &stderr)
	return code, stdout.String(), stderr.String()
}

func decodeInfo(t *testing.T, s string) FileInfo {
	t.Helper()
	var fi FileInfo
	if err := json.Unmarshal([]byte(s), &fi); err != nil {
		t.Fatalf("%q: %v", s, err)
	}
	return fi
}

func TestFileHelperMkdirRenamePut(t *testing.T) {
	dir := t.TempDir()
	deep := filepath.Join(dir, "a/b/c")
	code, out, errs := runHelper([]string{"mkdir", deep}, nil)
	if code != 0 {
		t.Fatalf("mkdir: %d %q", code, errs)
	}
	if fi := decodeInfo(t, out); !fi.IsDir || fi.Path != deep || fi.Name != "c" || fi.UID != os.Getuid() {
		t.Errorf("mkdir info: %+v", fi)
	}
	if code, _, errs := runHelper([]string{"mkdir", deep}, nil); code != HelperFailed || !strings.HasPrefix(errs, "EEXIST ") {
		t.Errorf("mkdir again: %d %q, want EEXIST", code, errs)
	}
	file := filepath.Join(dir, "x/y/f.txt")
	code, out, errs = runHelper([]string{"put", file, "600"}, strings.NewReader("content"))
	if code != 0 {
		t.Fatalf("put: %d %q", code, errs)
	}
	if fi := decodeInfo(t, out); fi.IsDir || fi.Size != 7 || fi.Mode.Perm() != 0o600 || fi.Path != file {
		t.Errorf("put info: %+v", fi)
	}
	if code, _, errs := runHelper([]string{"mkdir", file}, nil); code != HelperFailed || !strings.HasPrefix(errs, "ENOTDIR ") {
		t.Errorf("mkdir over a file: %d %q, want ENOTDIR", code, errs)
	}
	moved := filepath.Join(dir, "m/n/g.txt")
	code, out, errs = runHelper([]string{"rename", file, moved}, nil)
	if code != 0 {
		t.Fatalf("rename: %d %q", code, errs)
	}
	if fi := decodeInfo(t, out); fi.Path != moved || fi.Size != 7 {
		t.Errorf("rename info: %+v", fi)
	}
	if b, err := os.ReadFile(moved); err != nil || string(b) != "content" {
		t.Errorf("moved file: %q %v", b, err)
	}
	if code, _, errs := runHelper([]string{"rename", file, moved}, nil); code != HelperFailed || !strings.HasPrefix(errs, "ENOENT ") {
		t.Errorf("rename of a missing file: %d %q, want ENOENT", code, errs)
	}
	if code, _, errs := runHelper([]string{"rename", moved}, nil); code != HelperFailed || !strings.HasPrefix(errs, "EINVAL ") {
		t.Errorf("rename without a destination: %d %q, want EINVAL", code, errs)
	}
}

func TestFileHelperListDepth(t *testing.T) {
	dir := t.TempDir()
	for _, p := range []string{"a/b/c/deep", "a/f1", "z"} {
		if err := os.MkdirAll(filepath.Join(dir, filepath.Dir(p)), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, p), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Symlink(filepath.Join(dir, "a"), filepath.Join(dir, "link")); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		args []string
		want string
	}{
		{nil, "a link z"},
		{[]string{"1"}, "a link z"},
		{[]string{"2"}, "a a/b a/f1 link z"},
		{[]string{"9"}, "a a/b a/b/c a/b/c/deep a/f1 link z"},
	} {
		code, out, errs := runHelper(append([]string{"list", dir}, tc.args...), nil)
		if code != 0 {
			t.Fatalf("list %v: %d %q", tc.args, code, errs)
		}
		var infos []FileInfo
		if err := json.Unmarshal([]byte(out), &infos); err != nil {
			t.Fatalf("list %v: %q: %v", tc.args, out, err)
		}
		var got []string
		for _, fi := range infos {
			rel, _ := filepath.Rel(dir, fi.Path)
			got = append(got, rel)
		}
		if strings.Join(got, " ") != tc.want {
			t.Errorf("list %v: %q, want %q", tc.args, strings.Join(got, " "), tc.want)
		}
	}
	if code, out, errs := runHelper([]string{"list", filepath.Join(dir, "a/f1")}, nil); code != HelperFailed || out != "" || !strings.HasPrefix(errs, "ENOTDIR ") {
		t.Errorf("list of a file: %d %q %q, want ENOTDIR", code, out, errs)
	}
	if code, out, _ := runHelper([]string{"list", t.TempDir()}, nil); code != 0 || out != "[]\n" {
		t.Errorf("list of an empty directory: %d %q", code, out)
	}
	for _, bad := range []string{"0", "-1", "x"} {
		if code, _, errs := runHelper([]string{"list", dir, bad}, nil); code != HelperFailed || !strings.HasPrefix(errs, "EINVAL ") {
			t.Errorf("list depth %q: %d %q, want EINVAL", bad, code, errs)
		}
	}
}

func TestFileHelperWatch(t *testing.T) {
	dir := t.TempDir()
	if err := os.Mkdir(filepath.Join(dir, "sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	inR, inW := io.Pipe()
	outR, outW := io.Pipe()
	done := make(chan int)
	go func() {
		var stderr bytes.Buffer
		code := RunFileHelper([]string{"watch", dir, "recursive", "entries"}, inR, outW, &stderr)
		outW.Close()
		done <- code
	}()
	lines := bufio.NewScanner(outR)
	next := func() WatchEvent {
		t.Helper()
		if !lines.Scan() {
			t.Fatalf("watch output ended: %v", lines.Err())
		}
		var ev WatchEvent
		if err := json.Unmarshal(lines.Bytes(), &ev); err != nil {
			t.Fatalf("%q: %v", lines.Text(), err)
		}
		return ev
	}
	if ev := next(); !ev.Ready {
		t.Fatalf("first line: %+v, want ready", ev)
	}
	if err := os.WriteFile(filepath.Join(dir, "sub/new.txt"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Op != "create" || ev.Name != "sub/new.txt" || ev.Info == nil || ev.Info.Name != "new.txt" {
		t.Errorf("create event: %+v", ev)
	}
	// The write of "x" follows.
	if ev := next(); ev.Op != "write" || ev.Name != "sub/new.txt" {
		t.Errorf("write event: %+v", ev)
	}
	if err := os.Mkdir(filepath.Join(dir, "later"), 0o755); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Op != "create" || ev.Name != "later" || ev.Info == nil || !ev.Info.IsDir {
		t.Errorf("mkdir event: %+v", ev)
	}
	// A directory created after the start is watched too.
	if err := os.Remove(filepath.Join(dir, "sub/new.txt")); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Op != "remove" || ev.Name != "sub/new.txt" || ev.Info != nil {
		t.Errorf("remove event: %+v", ev)
	}
	if err := os.WriteFile(filepath.Join(dir, "later/f"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if ev := next(); ev.Op != "create" || ev.Name != "later/f" {
		t.Errorf("create in a new directory: %+v", ev)
	}
	// The helper's own write, a temporary renamed over the file: a
	// create, a chmod and a write of the file (as E2B's daemon reports
	// its write), the temporary not reported.
	if code, _, errs := runHelper([]string{"write", filepath.Join(dir, "later/f")}, strings.NewReader("y")); code != 0 {
		t.Fatalf("write: %d %q", code, errs)
	}
	if ev := next(); ev.Op != "create" || ev.Name != "later/f" || ev.Info == nil || ev.Info.Size != 1 {
		t.Errorf("the helper's write, first event: %+v", ev)
	}
	if ev := next(); ev.Op != "chmod" || ev.Name != "later/f" {
		t.Errorf("the helper's write, second event: %+v", ev)
	}
	if ev := next(); ev.Op != "write" || ev.Name != "later/f" {
		t.Errorf("the helper's write, third event: %+v", ev)
	}
	inW.Close() // EOF on stdin ends the watch
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("watch exited %d", code)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("watch did not end at stdin EOF")
	}
	if code, _, errs := runHelper([]string{"watch", filepath.Join(dir, "nope")}, nil); code != HelperFailed || !strings.HasPrefix(errs, "ENOENT ") {
		t.Errorf("watch of a missing directory: %d %q", code, errs)
	}
	if code, _, errs := runHelper([]string{"watch", dir, "bogus"}, nil); code != HelperFailed || !strings.HasPrefix(errs, "EINVAL ") {
		t.Errorf("watch with a bad flag: %d %q", code, errs)
	}
}

func TestFileHelperReadSized(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "f")
	if err := os.WriteFile(f, []byte("hello"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, errs := runHelper([]string{"read", f, "sized"}, nil); code != 0 || out != "5\nhello" {
		t.Errorf("sized read: %d %q %q", code, out, errs)
	}
	// A size-0 file of procfs: its length is what it held.
	code, out, errs := runHelper([]string{"read", "/proc/self/cmdline", "sized"}, nil)
	n, body, _ := strings.Cut(out, "\n")
	if code != 0 || n == "0" || n != strconv.Itoa(len(body)) {
		t.Errorf("sized read of a procfs file: %d %q %q", code, out, errs)
	}
	empty := filepath.Join(dir, "empty")
	if err := os.WriteFile(empty, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if code, out, _ := runHelper([]string{"read", empty, "sized"}, nil); code != 0 || out != "0\n" {
		t.Errorf("sized read of an empty file: %d %q", code, out)
	}
	if code, out, errs := runHelper([]string{"read", dir, "sized"}, nil); code != HelperFailed || out != "" || !strings.HasPrefix(errs, "EISDIR ") {
		t.Errorf("sized read of a directory: %d %q %q", code, out, errs)
	}
}

// TestFileHelperMetadata: put replaces a file's metadata (extended
// attributes under MetadataXattrPrefix) with the triples it is given,
// and stat, list and rename report or keep them.
func TestFileHelperMetadata(t *testing.T) {
	dir := t.TempDir()
	f := filepath.Join(dir, "m.txt")
	code, out, errs := runHelper([]string{"put", f, "meta", "author", "mish", "meta", "purpose", "upload"}, strings.NewReader("x"))
	if code == HelperFailed && strings.HasPrefix(errs, "EOPNOTSUPP") {
		t.Skipf("no user extended attributes on %s: %s", dir, errs)
	}
	if code != 0 {
		t.Fatalf("put with metadata: %d %q", code, errs)
	}
	want := map[string]string{"author": "mish", "purpose": "upload"}
	if fi := decodeInfo(t, out); !maps.Equal(fi.Metadata, want) {
		t.Errorf("put's answer: metadata %v, want %v", fi.Metadata, want)
	}
	if _, out, _ := runHelper([]string{"list", dir}, nil); !strings.Contains(out, `"metadata":{"author":"mish","purpose":"upload"}`) {
		t.Errorf("list: %s", out)
	}
	moved := filepath.Join(dir, "n.txt")
	if _, out, _ := runHelper([]string{"rename", f, moved}, nil); !maps.Equal(decodeInfo(t, out).Metadata, want) {
		t.Errorf("rename's answer: %s", out)
	}
	// A put without metadata clears it; a mode still comes first.
	if code, out, errs := runHelper([]string{"put", moved, "600"}, strings.NewReader("y")); code != 0 || decodeInfo(t, out).Metadata != nil {
		t.Errorf("put over it without metadata: %d %s %s, want no metadata left", code, out, errs)
	}
	for _, bad := range [][]string{{"meta", "k"}, {"meta", "", "v"}, {"600", "meta", strings.Repeat("k", MaxMetadataName+1), "v"}} {
		if code, _, errs := runHelper(append([]string{"put", moved}, bad...), strings.NewReader("z")); code != HelperFailed || !strings.HasPrefix(errs, "EINVAL") {
			t.Errorf("put %q: %d %q, want EINVAL", bad, code, errs)
		}
	}
}
