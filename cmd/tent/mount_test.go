package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
)

func TestMountVerb(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	id := l.create(t)
	src := t.TempDir()
	os.Chmod(src, 0o755)
	if err := os.WriteFile(filepath.Join(src, "in"), []byte("hello\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	l.tent(t, "mount", id, "--ro", src+":/data").expect(t, 0)
	if r := l.tent(t, "exec", id, "--", "cat", "/data/in"); r.stdout != "hello\n" {
		t.Errorf("cat through the attached mount: %q (exit %d)", r.stdout, r.code)
	}
	l.tent(t, "exec", id, "--", "sh", "-c", "echo x > /data/new").expect(t, 2, "Read-only file system")
	var rec struct {
		Spec struct {
			Mounts []struct{ Source, Target, Access string }
		}
	}
	if err := json.Unmarshal([]byte(l.tent(t, "inspect", id).stdout), &rec); err != nil || len(rec.Spec.Mounts) != 1 || rec.Spec.Mounts[0].Target != "/data" {
		t.Errorf("inspect after mount: %+v %v", rec, err)
	}
	// Refusals: exit 125 naming the problem, nothing changed.
	l.tent(t, "mount", id, "--ro", src+":/data").expect(t, 125, "already")
	l.tent(t, "mount", id, "--ro", src+":/proc/x").expect(t, 125, "/proc")
	l.tent(t, "mount", id, "--ro", filepath.Join(src, "missing")+":/m").expect(t, 125, "missing")
	l.tent(t, "mount", id, "--ro", src, "--rw", src).expect(t, 125, "exactly one")
	l.tent(t, "mount", id).expect(t, 125, "exactly one")
	l.tent(t, "mount", "nope", "--ro", src).expect(t, 125, "no such sandbox")
}
