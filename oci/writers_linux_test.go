package oci

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/internal/atomicfile/atomicfiletest"
)

// fullDisk mounts a small tmpfs (root only), writes old to name there
// and fills the rest: the next write there fails with ENOSPC.
func fullDisk(t *testing.T, name, old string) string {
	t.Helper()
	dir := atomicfiletest.SmallDisk(t, 64<<10, 0o700)
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(old), 0o600); err != nil {
		t.Fatal(err)
	}
	f, err := os.Create(filepath.Join(dir, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	buf := make([]byte, 4096)
	for {
		if _, err := f.Write(buf); errors.Is(err, unix.ENOSPC) {
			return dir
		} else if err != nil {
			t.Fatal(err)
		}
	}
}

// wantFile fails unless p holds content and its directory names alone.
func wantFile(t *testing.T, what, p, content string, names ...string) {
	t.Helper()
	if b, err := os.ReadFile(p); err != nil || string(b) != content {
		t.Errorf("%s: %s holds %q (%v), want %q", what, p, b, err, content)
	}
	ents, err := os.ReadDir(filepath.Dir(p))
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range ents {
		got = append(got, e.Name())
	}
	slices.Sort(names)
	if !slices.Equal(got, names) {
		t.Errorf("%s: %s holds %q, want %q (no temporary)", what, filepath.Dir(p), got, names)
	}
}

// deadTemp leaves in dir a temporary of o's pattern nobody holds (a
// killed writer's); liveTemp one this test holds locked (a writer at
// work).
func deadTemp(t *testing.T, dir string, o atomicfile.Options) string {
	t.Helper()
	n := o.TempName()
	if err := os.WriteFile(filepath.Join(dir, n), []byte("12"), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

func liveTemp(t *testing.T, dir string, o atomicfile.Options) string {
	t.Helper()
	f, err := atomicfile.Create(filepath.Join(dir, "other"), 0o600, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Abort)
	return f.TempName()
}

// The --pid-file containerd reads: on a full disk the old one stays and
// no temporary is left (the old writer left its .NAME.tmp); a killed
// writer's temporaries go with the next pid file, a live one's stay.
func TestWritePidFileFaults(t *testing.T) {
	dir := t.TempDir()
	deadTemp(t, dir, pidTemps)
	live := liveTemp(t, dir, pidTemps)
	p := filepath.Join(dir, "init.pid")
	if err := writePidFile(p, 4321); err != nil {
		t.Fatal(err)
	}
	wantFile(t, "a pid file beside a killed writer's temporary", p, "4321", "init.pid", live)
	if fi, err := os.Stat(p); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("the pid file: %v, %v; want mode 0600", fi, err)
	}

	full := fullDisk(t, "init.pid", "1234")
	err := writePidFile(filepath.Join(full, "init.pid"), 4321)
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("a pid file onto a full disk: %v, want ENOSPC", err)
	}
	wantFile(t, "a pid file onto a full disk", filepath.Join(full, "init.pid"), "1234", "init.pid", "filler")
}

// state.json: on a full disk the old one stays, no temporary left; a
// killed create's temporaries (os.CreateTemp's of older versions too)
// go with the next write; ROOT/ID is never followed when a symlink (the
// old writer wrote through it).
func TestWriteRecordFaults(t *testing.T) {
	const id = "c1"
	root := t.TempDir()
	dir := filepath.Join(root, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	deadTemp(t, dir, stateTemps)
	live := liveTemp(t, dir, stateTemps)
	older := ".state-1234567890"
	if err := os.WriteFile(filepath.Join(dir, older), []byte("{"), 0o600); err != nil {
		t.Fatal(err)
	}
	r := &record{ID: id, Pid: 1}
	if err := writeRecord(root, r); err != nil {
		t.Fatal(err)
	}
	if got, err := readRecord(root, id); err != nil || got.Pid != 1 {
		t.Fatalf("readRecord after writeRecord: %+v, %v", got, err)
	}
	b, _ := os.ReadFile(filepath.Join(dir, "state.json"))
	wantFile(t, "state.json beside a killed create's temporaries", filepath.Join(dir, "state.json"), string(b), "state.json", live)

	elsewhere := t.TempDir()
	if err := os.Symlink(elsewhere, filepath.Join(root, "c2")); err != nil {
		t.Fatal(err)
	}
	if err := writeRecord(root, &record{ID: "c2", Pid: 1}); !errors.Is(err, unix.ENOTDIR) && !errors.Is(err, unix.ELOOP) {
		t.Errorf("writeRecord into a symlinked ROOT/ID: %v, want ELOOP or ENOTDIR", err)
	}
	if ents, _ := os.ReadDir(elsewhere); len(ents) != 0 {
		t.Errorf("writeRecord wrote through the symlink: %v", ents)
	}

	old := `{"id":"c3","pid":7}`
	full := fullDisk(t, "c3/state.json", old)
	err := writeRecord(full, &record{ID: "c3", Pid: 8, Annotations: map[string]string{"a": strings.Repeat("x", 8192)}})
	if !errors.Is(err, unix.ENOSPC) {
		t.Fatalf("state.json onto a full disk: %v, want ENOSPC", err)
	}
	wantFile(t, "state.json onto a full disk", filepath.Join(full, "c3", "state.json"), old, "state.json")
}
