package supervised

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

// TestOlderSupervisorSaysHowToUpgrade: an operation a supervisor started
// by an older tent does not know comes back as what it was (an invalid
// request, exit code 125) with how to bring the sandbox to this version.
func TestOlderSupervisorSaysHowToUpgrade(t *testing.T) {
	err := remoteError(failure(errors.New("placeholder")))
	if strings.Contains(err.Error(), "older tent") {
		t.Fatalf("an ordinary refusal blames the version: %v", err)
	}
	old := failure(fmt.Errorf("%w: unknown operation %q", sandbox.ErrInvalidSpec, "stat"))
	err = remoteError(old)
	if !errors.Is(err, sandbox.ErrInvalidSpec) || sandbox.ExitCode(err) != 125 {
		t.Fatalf("%v: lost its kind or exit code (%d)", err, sandbox.ExitCode(err))
	}
	if !strings.Contains(err.Error(), `unknown operation "stat"`) || !strings.Contains(err.Error(), "stop it and resume it") {
		t.Fatalf("%q does not say how to upgrade", err)
	}
}
