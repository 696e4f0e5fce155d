package sandbox_test

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/tent-sandbox/tent/internal/sandboxtest"
	"github.com/tent-sandbox/tent/sandbox"
)

func TestMain(m *testing.M) {
	sandbox.Init()
	if os.Getenv("TENT_TEST_HOST_HELPER") != "" {
		os.Exit(hostHelper())
	}
	os.Exit(sandboxtest.Run(m))
}

// hostHelper plays a host program that owns a sandbox, so a test can
// SIGKILL it: it starts `sleep 307`, says "started" and waits.
func hostHelper() int {
	cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sleep", "307")
	if err := cmd.Start(); err != nil {
		fmt.Println("error:", err)
		return 1
	}
	fmt.Println("started", strings.Join(cmd.Report.CgroupPaths, " "))
	_ = cmd.Wait()
	return 0
}
