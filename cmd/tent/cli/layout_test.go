package cli

import (
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// mechanismPackages are the packages below sandbox (DESIGN's layout):
// the CLI and the other frontends reach them only through sandbox and its
// subpackages.
var mechanismPackages = []string{"namespaces", "fs", "cgroups", "seccomp", "netpolicy", "internal/hostcheck"}

// TestCLIImportsNoMechanism: no non-test Go file of the CLI (this
// package, wherever it lives, and the programs cmd/tent and
// cmd/tent-server) imports a mechanism package or one of its
// subpackages, under any build constraint. (Where the test binary runs
// on a copy of this package's directory only, as in the VM, it checks
// that directory.)
func TestCLIImportsNoMechanism(t *testing.T) {
	dirs := []string{"."}
	if root := repoRoot(); hasFile(filepath.Join(root, "go.mod")) {
		dirs = append(dirs, filepath.Join(root, "cmd", "tent"), filepath.Join(root, "cmd", "tent-server"))
	}
	if files := checkNoMechanism(t, dirs); files < 10 {
		t.Fatalf("checked %d files: the CLI's sources were not found", files)
	}
}

// frontends are the module's frontends besides the CLI, with their
// subpackages (serve/envd among serve's): E2B's API, MCP and the runc CLI.
var frontends = []string{"serve", "mcp", "oci"}

// TestFrontendsImportNoMechanism: no non-test Go file of a frontend
// (serve and serve/envd, mcp, oci, and their subpackages) imports a
// mechanism package or one of its subpackages, under any build
// constraint: they go through sandbox and its subpackages, as the CLI
// does. It needs the module's sources (skipped on a copy of this
// directory alone).
func TestFrontendsImportNoMechanism(t *testing.T) {
	root := repoRoot()
	if !hasFile(filepath.Join(root, "go.mod")) {
		t.Skip("the module's sources are not here")
	}
	for _, f := range frontends {
		dir := filepath.Join(root, f)
		if files := checkNoMechanism(t, []string{dir}); files < 3 {
			t.Errorf("checked %d files in %s: its sources were not found", files, dir)
		}
	}
}

// checkNoMechanism reports, as test errors, each import of a mechanism
// package by a non-test Go file under dirs (testdata aside), and returns
// how many files it checked.
func checkNoMechanism(t *testing.T, dirs []string) int {
	t.Helper()
	const module = "github.com/tent-sandbox/tent/"
	files := 0
	for _, dir := range dirs {
		err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() && d.Name() == "testdata" {
				return filepath.SkipDir
			}
			if d.IsDir() || !strings.HasSuffix(p, ".go") || strings.HasSuffix(p, "_test.go") {
				return nil
			}
			f, err := parser.ParseFile(token.NewFileSet(), p, nil, parser.ImportsOnly)
			if err != nil {
				return err
			}
			files++
			for _, imp := range f.Imports {
				path, _ := strconv.Unquote(imp.Path.Value)
				rest, ok := strings.CutPrefix(path, module)
				if !ok {
					continue
				}
				for _, m := range mechanismPackages {
					if rest == m || strings.HasPrefix(rest, m+"/") {
						t.Errorf("%s imports %s: a frontend goes through sandbox and its subpackages", p, path)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return files
}

// hasFile reports whether p exists.
func hasFile(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
