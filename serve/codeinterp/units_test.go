package codeinterp

import (
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestPythonUnits runs the server's Python unit tests (testdata/test_*.py)
// with the host's Python, the server's directory on its path.
func TestPythonUnits(t *testing.T) {
	needModules(t, "jupyter_client")
	server, err := filepath.Abs("server")
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/usr/bin/python3", "-B", "-m", "unittest", "discover", "-s", "testdata", "-p", "test_*.py", "-v")
	cmd.Env = []string{"PYTHONPATH=" + server, "PATH=/usr/bin:/bin", "LC_ALL=C.UTF-8"}
	out, err := cmd.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "\nOK") {
		t.Fatalf("python unit tests: %v\n%s", err, out)
	}
	t.Logf("%s", out)
}
