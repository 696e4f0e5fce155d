package sandbox_test

import (
	"bytes"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// tree reads a directory as path -> content ("<dir>" for directories).
func tree(t *testing.T, root string) map[string]string {
	t.Helper()
	out := map[string]string{}
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || p == root {
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if fi.IsDir() {
			out[rel] = "<dir>"
		} else {
			b, _ := os.ReadFile(p)
			out[rel] = string(b)
		}
		return nil
	})
	return out
}

func TestCopyOnWriteMount(t *testing.T) {
	src := t.TempDir() // cow: never written, idmapped from its owner (root included)
	skipWithoutIdmap(t, src, sandbox.CopyOnWrite)
	os.Chmod(src, 0o777)
	// A root caller's sandbox runs as an unprivileged id, which must be
	// able to reach the source (see the README).
	os.Chmod(filepath.Dir(src), 0o755)
	files := map[string]string{"keep.txt": "same\n", "edit.txt": "one\ntwo\nthree\n", "gone.txt": "bye\n", "sub/deep.txt": "deep\n"}
	for p, c := range files {
		os.MkdirAll(filepath.Join(src, filepath.Dir(p)), 0o777)
		os.WriteFile(filepath.Join(src, p), []byte(c), 0o666)
		os.Chmod(filepath.Join(src, p), 0o666) // writable by a root caller's unprivileged sandbox too
	}
	os.Chmod(filepath.Join(src, "sub"), 0o777)
	before := tree(t, src)
	sb := provision(t, sandbox.Spec{Filesystem: sandbox.Filesystem{Mounts: []sandbox.Mount{{Source: src, Target: "/work", Access: sandbox.CopyOnWrite}}}})
	script := `set -e; cd /work; printf 'one\nTWO\nthree\n' > edit.txt; rm gone.txt; echo new > new.txt; rm -r sub; mkdir -p made/x; echo x > made/x/f; cat edit.txt keep.txt`
	var stderr bytes.Buffer
	var stdout bytes.Buffer
	res, err := sb.Exec(context.Background(), sandbox.ExecRequest{Args: []string{"sh", "-c", script}, Stdout: &stdout, Stderr: &stderr})
	if err != nil {
		t.Fatal(err)
	}
	out := strings.TrimSpace(stdout.String())
	if stderr.Len() > 0 {
		t.Logf("stderr: %s", stderr.String())
	}
	if res.ExitCode != 0 || out != "one\nTWO\nthree\nsame" {
		t.Fatalf("writing through the cow mount: %+v %q", res, out)
	}
	if after := tree(t, src); len(after) != len(before) || after["edit.txt"] != files["edit.txt"] || after["gone.txt"] != "bye\n" {
		t.Fatalf("the host directory changed: %v", after)
	}

	layers := sb.Info().Layers
	if len(layers) != 1 {
		t.Fatalf("cow layers: %v", layers)
	}
	changes, err := layers[0].Diff()
	if err != nil {
		t.Fatalf("Diff: %v %v", changes, err)
	}
	got := map[string]string{}
	for _, c := range changes {
		got[c.Path] = string(c.Kind)
	}
	want := map[string]string{"edit.txt": "modified", "gone.txt": "deleted", "new.txt": "added", "sub": "deleted", "sub/deep.txt": "deleted",
		"made": "added", "made/x": "added", "made/x/f": "added"}
	for p, k := range want {
		if got[p] != k {
			t.Errorf("change of %s: %q, want %q (all: %v)", p, got[p], k, got)
		}
	}
	if _, ok := got["keep.txt"]; ok {
		t.Errorf("unchanged keep.txt reported: %v", got)
	}

	// The patch applies to a copy of the original with patch -p1 ...
	var patch bytes.Buffer
	if err := sb.Info().Layers[0].WritePatch(&patch); err != nil {
		t.Fatal(err)
	}
	copyDir := t.TempDir()
	if out, err := exec.Command("cp", "-a", src+"/.", copyDir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v %s", err, out)
	}
	cmd := exec.Command("patch", "-p1", "--batch", "--remove-empty-files")
	cmd.Dir, cmd.Stdin = copyDir, &patch
	if out, err := cmd.CombinedOutput(); err != nil {
		if _, lookErr := exec.LookPath("patch"); lookErr != nil {
			t.Skip("no patch(1) on this host")
		}
		t.Fatalf("patch -p1: %v\n%s\n%s", err, out, patch.String())
	}
	inside, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "cd /work && cat edit.txt new.txt made/x/f; ls"}})
	if b, _ := os.ReadFile(filepath.Join(copyDir, "edit.txt")); string(b) != "one\nTWO\nthree\n" {
		t.Errorf("patched edit.txt: %q", b)
	}
	if _, err := os.Stat(filepath.Join(copyDir, "gone.txt")); !os.IsNotExist(err) {
		t.Errorf("patched copy still has gone.txt")
	}
	// ... and ExportTo reproduces the sandbox's view exactly.
	exportDir := t.TempDir()
	exec.Command("cp", "-a", src+"/.", exportDir).Run()
	if err := sb.Info().Layers[0].ExportTo(exportDir); err != nil {
		t.Fatal(err)
	}
	listing := mustExecList(t, sb)
	if got := strings.Join(sortedKeys(tree(t, exportDir)), " "); got != listing {
		t.Errorf("exported tree %q, sandbox sees %q", got, listing)
	}
	_ = inside
	layer := sb.Info().Layers[0].Upper
	if err := sb.Terminate(context.Background()); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Dir(filepath.Dir(layer))); !os.IsNotExist(err) {
		t.Errorf("cow layers left after terminate: %v", err)
	}
}

func mustExecList(t *testing.T, sb *sandbox.Sandbox) string {
	out, _ := execOut(t, sb, sandbox.ExecRequest{Args: []string{"sh", "-c", "cd /work && find . -mindepth 1 | sed 's|^./||' | sort | tr '\\n' ' '"}})
	return strings.TrimSpace(out)
}

func sortedKeys(m map[string]string) []string {
	var ks []string
	for k := range m {
		ks = append(ks, k)
	}
	sortStrings(ks)
	return ks
}
