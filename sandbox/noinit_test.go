package sandbox_test

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// A program that never calls sandbox.Init still gets a working sandbox,
// quickly: the init starts from package initialisation.
func TestProgramWithoutInitCallWorks(t *testing.T) {
	if _, err := exec.LookPath("go"); err != nil {
		t.Skip("needs the go tool to build the program")
	}
	bin := filepath.Join(t.TempDir(), "noinit")
	if out, err := exec.Command("go", "build", "-o", bin, "./testdata/noinit").CombinedOutput(); err != nil {
		t.Skipf("cannot build the program here: %v\n%s", err, out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, bin).CombinedOutput()
	if err != nil || strings.TrimSpace(string(out)) != "sandboxed" {
		t.Fatalf("program without sandbox.Init: %v, output %q", err, out)
	}
}
