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
// the CLI reaches them only through sandbox and its subpackages.
var mechanismPackages = []string{"namespaces", "fs", "cgroups", "seccomp", "netpolicy", "internal/hostcheck"}

// TestCLIImportsNoMechanism: no non-test Go file of the CLI (this
// package, wherever it lives, and the programs cmd/tent and
// cmd/tent-server) imports a mechanism package or one of its
// subpackages, under any build constraint. (Where the test binary runs
// on a copy of this package's directory only, as in the VM, it checks
// that directory.)
func TestCLIImportsNoMechanism(t *testing.T) {
	const module = "github.com/tent-sandbox/tent/"
	dirs := []string{"."}
	if root := repoRoot(); hasFile(filepath.Join(root, "go.mod")) {
		dirs = append(dirs, filepath.Join(root, "cmd", "tent"), filepath.Join(root, "cmd", "tent-server"))
	}
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
						t.Errorf("%s imports %s: the CLI goes through sandbox and its subpackages", p, path)
					}
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if files < 10 {
		t.Fatalf("checked %d files: the CLI's sources were not found", files)
	}
}

// hasFile reports whether p exists.
func hasFile(p string) bool {
	_, err := os.Stat(p)
	return err == nil
}
