package sandbox_test

import (
	"context"
	"os"
	"testing"

	"github.com/tent-sandbox/tent/sandbox"
)

func TestSmoke(t *testing.T) {
	cmd := sandbox.Command(context.Background(), sandbox.Spec{}, "sh", "-c", "id; hostname; ls /; cat /proc/self/status | grep -E 'Cap|NoNew|Seccomp'; echo $HOME $PATH; ls /dev; mount | head -30")
	cmd.Stdout = os.Stdout
	cmd.Stderr = os.Stderr
	err := cmd.Run()
	t.Logf("err=%v report=%+v", err, cmd.Report)
}
