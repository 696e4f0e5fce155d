package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"slices"
	"strings"
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
	if r := l.tent(t, "exec", id, "--", "sh", "-c", "echo x > /data/new"); r.code == 0 || !strings.Contains(r.stderr, "Read-only file system") {
		t.Errorf("writing into the ro mount: exit %d, stderr %q; want a failure with EROFS", r.code, r.stderr)
	}
	var rec struct {
		Spec struct {
			Mounts []struct{ Source, Target, Access string }
		}
	}
	if err := json.Unmarshal([]byte(l.tent(t, "inspect", id).stdout), &rec); err != nil || len(rec.Spec.Mounts) != 1 || rec.Spec.Mounts[0].Target != "/data" {
		t.Errorf("inspect after mount: %+v %v", rec, err)
	}
	// Refusals: exit 125 naming the problem, nothing changed.
	l.tent(t, "mount", id, "--ro", src+":/data").expect(t, 125, "already used")
	l.tent(t, "mount", id, "--ro", src+":/proc/x").expect(t, 125, `target "/proc/x" is reserved`)
	l.tent(t, "mount", id, "--ro", filepath.Join(src, "missing")+":/m").expect(t, 125, "missing")
	l.tent(t, "mount", id, "--ro", src, "--rw", src).expect(t, 125, "exactly one")
	l.tent(t, "mount", id).expect(t, 125, "exactly one")
	l.tent(t, "mount", "nope", "--ro", src).expect(t, 125, "no such sandbox")
}

func TestSnapshotIncludeRW(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	src := t.TempDir()
	os.Chmod(src, 0o777)
	if os.Geteuid() == 0 {
		// A root caller's rw mount is written as the directory's owner,
		// who must not be root.
		if err := os.Chown(src, 65534, 65534); err != nil {
			t.Fatal(err)
		}
	}
	id := l.create(t, "--rw", src+":/rw")
	l.tent(t, "exec", id, "--", "sh", "-c", "echo x > /rw/f").expect(t, 0)
	parts := func(args ...string) []string {
		r := l.tent(t, append([]string{"snapshot"}, args...)...)
		r.expect(t, 0)
		snap := strings.TrimSpace(r.stdout)
		b, err := os.ReadFile(filepath.Join(l.dir, "snapshots", snap, "manifest.json"))
		if err != nil {
			t.Fatal(err)
		}
		var m struct {
			Parts []struct{ Kind, Target string }
		}
		if err := json.Unmarshal(b, &m); err != nil {
			t.Fatal(err)
		}
		var kinds []string
		for _, p := range m.Parts {
			kinds = append(kinds, p.Kind+":"+p.Target)
		}
		return kinds
	}
	if got := parts(id); slices.Contains(got, "rw:/rw") {
		t.Errorf("default snapshot parts %v include the rw mount", got)
	}
	if got := parts("--include-rw", id); !slices.Contains(got, "rw:/rw") {
		t.Errorf("--include-rw snapshot parts %v lack the rw mount", got)
	}
}

// tent mount takes what tent create takes: a relative source with its
// default target (the source's absolute path, beneath /tmp here, where
// an attach created no mount point: "lies beneath another mount").
func TestMountRelativeSourceAsCreate(t *testing.T) {
	t.Parallel()
	l := newLife(t)
	work := t.TempDir()
	os.Chmod(work, 0o755)
	for _, d := range []string{"data", "more"} {
		os.Mkdir(filepath.Join(work, d), 0o755)
		os.WriteFile(filepath.Join(work, d, "in"), []byte(d+"\n"), 0o644)
	}
	os.WriteFile(filepath.Join(work, "one.txt"), []byte("file\n"), 0o644)
	create := invocation{args: []string{"--state-dir", l.dir, "create", "--ro", "./data"}, dir: work}.run(t)
	create.expect(t, 0)
	id := strings.TrimSpace(create.stdout)
	for _, src := range []string{"./more", "one.txt"} {
		r := invocation{args: []string{"--state-dir", l.dir, "mount", id, "--ro", src}, dir: work}.run(t)
		if r.code != 0 || r.stderr != "" {
			t.Errorf("tent mount %s --ro %s: exit %d, stderr %q; want 0 and nothing", id, src, r.code, r.stderr)
		}
	}
	r := l.tent(t, "exec", id, "--", "cat", work+"/data/in", work+"/more/in", work+"/one.txt")
	if r.stdout != "data\nmore\nfile\n" {
		t.Errorf("reading the mounts: %q (exit %d, %s)", r.stdout, r.code, r.stderr)
	}
	// A mount point the sandbox cannot create is still refused.
	l.tent(t, "mount", id, "--ro", work+"/more:/usr/new").expect(t, 125, "/usr/new does not exist in the sandbox")
}
