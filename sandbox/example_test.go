package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// A program that starts sandboxes calls sandbox.Init first thing in main;
// here TestMain does it. The command runs with no network, a read-only
// view of the host's system directories, an empty /tmp and $HOME, the
// default seccomp profile and Landlock.
func Example() {
	dir, _ := os.MkdirTemp("", "tent-example-")
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	os.WriteFile(dir+"/greeting", []byte("hello from"), 0o644)

	spec := sandbox.Spec{
		Filesystem: sandbox.Filesystem{
			Mounts: []sandbox.Mount{{Source: dir, Target: "/work", Access: sandbox.ReadOnly}},
		},
		Limits: sandbox.Limits{Timeout: 10 * time.Second, NoFile: 256},
	}
	cmd := sandbox.Command(context.Background(), spec, "sh", "-c", "echo $(cat /work/greeting) $(hostname) > /tmp/out; cat /tmp/out")
	out, err := cmd.Output()
	if err != nil {
		fmt.Println("error:", err, "exit code", sandbox.ExitCode(err))
		return
	}
	fmt.Print(string(out))
	// Output: hello from tent
}

// A command that exits non-zero yields an *ExitError whose ExitCode
// follows the shell's conventions (128+N for a signal, 124 for a timeout).
func ExampleExitError() {
	spec := sandbox.Spec{Limits: sandbox.Limits{Timeout: 200 * time.Millisecond}}
	err := sandbox.Command(context.Background(), spec, "sleep", "5").Run()
	fmt.Println(err, sandbox.ExitCode(err))
	// Output: timed out after 200ms: process tree killed 124
}
