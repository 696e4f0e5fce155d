package serve

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs/layer"
)

// TestVolumeHostileEntries: what a sandbox can leave in a volume it
// mounts — links to the host's files and directories, a FIFO, names
// that climb — is never followed, blocked on or escaped through by the
// content API, which acts as the server's user.
func TestVolumeHostileEntries(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, Options{VolumesDir: dir})
	id, tok := h.newVolume("v")
	data := filepath.Join(dir, id, "data")
	outside := t.TempDir()
	secret := filepath.Join(outside, "secret")
	if err := os.WriteFile(secret, []byte("host secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// As a sandbox would plant them.
	must(os.Symlink(secret, filepath.Join(data, "file-link")))
	must(os.Symlink(outside, filepath.Join(data, "dir-link")))
	must(os.Mkdir(filepath.Join(data, "d"), 0o755))
	must(os.Symlink(outside, filepath.Join(data, "d", "up")))
	must(syscall.Mkfifo(filepath.Join(data, "fifo"), 0o644))

	deadline := time.AfterFunc(30*time.Second, func() { panic("a content request blocked") })
	defer deadline.Stop()
	for _, c := range []struct {
		method, op, p, query, body string
		status                     int
	}{
		{"GET", "file", "/file-link", "", "", 400},
		{"GET", "file", "/dir-link/secret", "", "", 400},
		{"GET", "file", "/d/up/secret", "", "", 400},
		{"GET", "file", "/fifo", "", "", 400},
		{"PUT", "file", "/dir-link/planted", "", "x", 400},
		{"POST", "dir", "/dir-link/newdir", "force=true", "", 400},
		{"POST", "dir", "/dir-link", "force=true", "", 400},
		{"GET", "dir", "/dir-link", "", "", 400},
		{"GET", "path", "/dir-link/secret", "", "", 400},
		{"DELETE", "path", "/dir-link/secret", "", "", 400},
		{"PUT", "file", "/../../../" + strings.TrimPrefix(secret, "/"), "force=true", "overwritten", 404},
	} {
		r := h.content(c.method, id, tok, c.op, c.p, c.query, c.body)
		if r.status != c.status {
			t.Errorf("%s %s %s: %d %s, want %d", c.method, c.op, c.p, r.status, r.body, c.status)
		}
		if strings.Contains(string(r.body), "host secret") {
			t.Errorf("%s %s %s: the host's file leaked: %s", c.method, c.op, c.p, r.body)
		}
	}
	r := h.do("PATCH", "/volumecontent/"+id+"/path?path=/file-link", `{"mode":511}`, "X-API-Key", "", "Authorization", "Bearer "+tok)
	if r.status != http.StatusBadRequest {
		t.Errorf("PATCH of a link: %d %s", r.status, r.body)
	}
	// Links are reported as links, with their targets, never followed.
	if e := decode[volumeEntry](t, h.content("GET", id, tok, "path", "/file-link", "", "")); e.Type != "symlink" || e.Target != secret {
		t.Errorf("stat of a link: %+v", e)
	}
	// A write over a link replaces the link, not its target; removing a
	// directory that holds a link to a host directory removes the link.
	if r := h.content("PUT", id, tok, "file", "/file-link", "force=true", "mine"); r.status != http.StatusCreated {
		t.Errorf("write over a link: %d %s", r.status, r.body)
	}
	if r := h.content("DELETE", id, tok, "path", "/d", "", ""); r.status != http.StatusNoContent {
		t.Errorf("remove a directory holding a link out: %d %s", r.status, r.body)
	}
	if r := h.content("DELETE", id, tok, "path", "/dir-link", "", ""); r.status != http.StatusNoContent {
		t.Errorf("remove a link to a directory: %d %s", r.status, r.body)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret" {
		t.Fatalf("the host's file changed: %q %v", b, err)
	}
	if fi, err := os.Stat(secret); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("the host's file's mode changed: %v %v", fi.Mode(), err)
	}
	if ents, _ := os.ReadDir(outside); len(ents) != 1 {
		t.Fatalf("the host's directory changed: %v", ents)
	}
	// A climbing path stays in the volume.
	if r := h.content("PUT", id, tok, "file", "/../../escaped", "", "x"); r.status != http.StatusCreated {
		t.Fatalf("a climbing path: %d %s", r.status, r.body)
	}
	if _, err := os.Stat(filepath.Join(data, "escaped")); err != nil {
		t.Fatalf("a climbing path did not land in the volume's root: %v", err)
	}
	// Destroying the volume removes its links, not what they point to.
	if r := h.do("DELETE", "/volumes/"+id, ""); r.status != http.StatusNoContent {
		t.Fatalf("destroy: %d %s", r.status, r.body)
	}
	if b, err := os.ReadFile(secret); err != nil || string(b) != "host secret" {
		t.Fatalf("the host's file after the destroy: %q %v", b, err)
	}
}

// TestVolumeUnfinishedDestroy: a destroy cut short (the server stopped
// while removing) is finished when the server starts, links left in the
// volume removed, not followed.
func TestVolumeUnfinishedDestroy(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	if err := os.WriteFile(filepath.Join(outside, "keep"), []byte("k"), 0o600); err != nil {
		t.Fatal(err)
	}
	aside := filepath.Join(dir, ".destroyed-"+newVolumeID(), "data")
	if err := os.MkdirAll(filepath.Join(aside, "a", "b"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(outside, filepath.Join(aside, "a", "out")); err != nil {
		t.Fatal(err)
	}
	h := newHarness(t, Options{VolumesDir: dir})
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left after the start: %v", ents)
	}
	if b, err := os.ReadFile(filepath.Join(outside, "keep")); err != nil || string(b) != "k" {
		t.Fatalf("outside: %q %v", b, err)
	}
	if v := decode[[]volumeReply](t, h.do("GET", "/volumes", "")); len(v) != 0 {
		t.Fatalf("volumes: %+v", v)
	}
}

// TestVolumeListBounded: a tree a sandbox built to make a list's answer
// huge (long names, deep, many files at the bottom: 1200 paths of ~15 KB)
// is refused with a 400 rather than held in the server's memory; a
// shallower list of it still answers.
func TestVolumeListBounded(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, Options{VolumesDir: dir})
	id, tok := h.newVolume("v")
	fd, err := unix.Open(filepath.Join(dir, id, "data"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	long := strings.Repeat("n", 255)
	for range 60 {
		if err := unix.Mkdirat(fd, long, 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, long, unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	for i := range 1200 {
		f, err := unix.Openat(fd, fmt.Sprintf("%04d%s", i, long[4:]), unix.O_CREAT|unix.O_WRONLY, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		unix.Close(f)
	}
	unix.Close(fd)
	r := h.content("GET", id, tok, "dir", "/", "depth=64", "")
	if r.status != http.StatusBadRequest || !strings.Contains(r.errBody(t).Message, "over 16 MiB") {
		t.Fatalf("depth 64: %d %.200s", r.status, r.body)
	}
	if ls := decode[[]volumeEntry](t, h.content("GET", id, tok, "dir", "/", "depth=2", "")); len(ls) != 2 {
		t.Fatalf("depth 2: %d entries", len(ls))
	}
}

// TestVolumeDestroyRefusals: no destroy while a sandbox is being
// provisioned (a fork or a resume mounts whatever volume its snapshot
// names, found by review: a fork racing a destroy got an emptied mount);
// a destroy that cannot remove every file (a tree nested deeper than the
// removal walks) keeps the volume instead of losing it; a sandbox's
// chmod 000 / 0500 / file 000 does not stop a server that is not root.
func TestVolumeDestroyRefusals(t *testing.T) {
	dir := t.TempDir()
	h := newHarness(t, Options{VolumesDir: dir})
	id, tok := h.newVolume("v")
	release, err := h.s.acquireProvision(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if r := h.do("DELETE", "/volumes/"+id, ""); r.status != http.StatusConflict || !strings.Contains(r.errBody(t).Message, "forked or resumed") {
		t.Fatalf("destroy during a provision: %d %s", r.status, r.body)
	}
	release()
	// While a destroy removes the files, the name stays taken (a destroy
	// that fails puts the volume back: found by review, a create of the
	// same name in between lost the volume) and nothing serves it.
	h.s.vols.mu.Lock()
	h.s.vols.byID[id].destroying = true
	h.s.vols.mu.Unlock()
	for _, c := range []struct{ method, path, body string }{
		{"POST", "/volumes", `{"name":"v"}`},
		{"GET", "/volumecontent/" + id + "/path?path=/", ""},
		{"POST", "/v2/sandboxes", `{"templateID":"base","volumeMounts":[{"name":"v","path":"/mnt/v"}]}`},
		{"DELETE", "/volumes/" + id, ""},
	} {
		if r := h.do(c.method, c.path, c.body); r.status != http.StatusConflict {
			t.Errorf("%s %s during a destroy: %d %s", c.method, c.path, r.status, r.body)
		}
	}
	h.s.vols.mu.Lock()
	h.s.vols.byID[id].destroying = false
	h.s.vols.mu.Unlock()

	data := filepath.Join(dir, id, "data")
	fd, err := unix.Open(data, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if err != nil {
		t.Fatal(err)
	}
	for range layer.MaxDepth + 8 {
		if err := unix.Mkdirat(fd, "d", 0o755); err != nil {
			t.Fatal(err)
		}
		next, err := unix.Openat(fd, "d", unix.O_RDONLY|unix.O_DIRECTORY, 0)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		fd = next
	}
	unix.Close(fd)
	r := h.do("DELETE", "/volumes/"+id, "")
	if r.status != http.StatusConflict || !strings.Contains(r.errBody(t).Message, "kept") {
		t.Fatalf("destroy of a tree too deep: %d %s", r.status, r.body)
	}
	if v := decode[volumeReply](t, h.do("GET", "/volumes/"+id, "")); v.VolumeID != id {
		t.Fatalf("the volume after a failed destroy: %+v", v)
	}
	// A sandbox can still clear it (a mv of the tree's top up a level
	// would do; here the test cuts it), and the destroy then goes through.
	if err := os.Rename(filepath.Join(data, strings.Repeat("d/", 40)), filepath.Join(data, "cut")); err != nil {
		t.Fatal(err)
	}
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	// What a sandbox may do to the modes (as the server's user's files).
	must(os.MkdirAll(filepath.Join(data, "locked", "sub"), 0o755))
	must(os.WriteFile(filepath.Join(data, "locked", "f"), []byte("x"), 0o644))
	must(os.WriteFile(filepath.Join(data, "noread"), []byte("x"), 0o644))
	must(os.Chmod(filepath.Join(data, "locked", "sub"), 0))
	must(os.Chmod(filepath.Join(data, "locked"), 0o500))
	must(os.Chmod(filepath.Join(data, "noread"), 0))
	r = h.do("PATCH", "/volumecontent/"+id+"/path?path=/noread", `{"mode":420}`, "X-API-Key", "", "Authorization", "Bearer "+tok)
	if e := decode[volumeEntry](t, r); r.status != http.StatusOK || e.Mode != 0o644 {
		t.Fatalf("PATCH of a mode 0 file: %d %s", r.status, r.body)
	}
	if r := h.do("DELETE", "/volumes/"+id, ""); r.status != http.StatusNoContent {
		t.Fatalf("destroy: %d %s", r.status, r.body)
	}
	if ents, _ := os.ReadDir(dir); len(ents) != 0 {
		t.Fatalf("left: %v", ents)
	}
}
