package codeinterp

import (
	"archive/zip"
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// fakePython is a script that answers the probe as a Python lacking the
// modules named in missing would.
func fakePython(t *testing.T, missing string) string {
	t.Helper()
	py := filepath.Join(t.TempDir(), "python3")
	if err := os.WriteFile(py, []byte("#!/bin/sh\necho '"+missing+"'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return py
}

func withPythons(t *testing.T, list ...string) {
	t.Helper()
	old := pythons
	pythons = list
	t.Cleanup(func() { pythons = old })
}

// A host whose Python lacks modules gets an error naming the Debian
// packages to install, which matches ErrUnsupported; one with none
// names Python too; the first complete Python is chosen.
func TestProbeNamesWhatIsMissing(t *testing.T) {
	ctx := context.Background()
	lacking := fakePython(t, "pandas PIL")
	withPythons(t, filepath.Join(t.TempDir(), "absent"), lacking)
	_, err := Probe(ctx)
	var me *MissingError
	if !errors.As(err, &me) || !errors.Is(err, sandbox.ErrUnsupported) ||
		me.Python != lacking || !slices.Equal(me.Packages, []string{"python3-pandas", "python3-pil"}) {
		t.Fatalf("a Python without pandas and PIL: %v (%+v)", err, me)
	}
	if !strings.Contains(err.Error(), "install python3-pandas python3-pil") {
		t.Errorf("message %q does not say what to install", err)
	}

	withPythons(t, filepath.Join(t.TempDir(), "absent"))
	if _, err := Probe(ctx); !errors.As(err, &me) || me.Python != "" || len(me.Packages) != len(Requirements) ||
		!strings.Contains(err.Error(), "install python3 and python3-jupyter-client") {
		t.Errorf("no Python: %v", err)
	}

	complete := fakePython(t, "")
	withPythons(t, lacking, complete)
	if py, err := Probe(ctx); err != nil || py != complete {
		t.Errorf("a complete Python second: %q, %v; want %q", py, err, complete)
	}
}

// The template's service carries the server's Python files, and nothing
// else, in its environment; the bootstrap removes the variable before
// the server runs; memory is at least MinMemory, and no limit stays none.
func TestSpecCarriesTheServer(t *testing.T) {
	spec, err := Spec("/usr/bin/python3", sandbox.Limits{Memory: 512 << 20, Pids: 100})
	if err != nil {
		t.Fatal(err)
	}
	if spec.Limits.Memory != MinMemory || spec.Limits.Pids != 100 {
		t.Errorf("limits %+v: want memory raised to %d, pids kept", spec.Limits, MinMemory)
	}
	if s, _ := Spec("/usr/bin/python3", sandbox.Limits{}); s.Limits.Memory != 0 {
		t.Errorf("no base limits: memory %d, want none (no cgroup to set it)", s.Limits.Memory)
	}
	svc := spec.Service
	if err := svc.Validate(); err != nil || svc.ReadyPort != Port || svc.Command[0] != "/usr/bin/python3" {
		t.Fatalf("service %+v: %v", svc, err)
	}
	if !strings.Contains(svc.Command[2], `os.environ.pop("`+serverEnv+`")`) {
		t.Errorf("the bootstrap does not remove %s: %s", serverEnv, svc.Command[2])
	}
	var archive string
	for _, e := range svc.Env {
		if v, ok := strings.CutPrefix(e, serverEnv+"="); ok {
			archive = v
		}
	}
	raw, err := base64.StdEncoding.DecodeString(archive)
	if err != nil {
		t.Fatal(err)
	}
	zr, err := zip.NewReader(bytes.NewReader(raw), int64(len(raw)))
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, f := range zr.File {
		names = append(names, f.Name)
		if !strings.HasSuffix(f.Name, ".py") {
			t.Errorf("archive member %q: want the server's .py files only", f.Name)
		}
	}
	if !slices.Contains(names, "main.py") {
		t.Errorf("archive %v has no main.py", names)
	}
}
