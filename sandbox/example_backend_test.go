package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/tent-sandbox/tent/sandbox"
)

// The Local backend behind the Backend interface: sandboxes named by id
// or a unique prefix of it.
func ExampleLocal() {
	ctx := context.Background()
	local, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer local.Close(ctx) // terminates what is left, removes its snapshots
	var b sandbox.Backend = local

	s, err := b.Provision(ctx, sandbox.Spec{Env: []string{"GREETING=hello"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	var out bytes.Buffer
	if _, err := b.Exec(ctx, s.ID[:6], sandbox.ExecRequest{Args: []string{"sh", "-c", "echo $GREETING"}, Stdout: &out}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(out.String())
	if err := b.Terminate(ctx, s.ID); err != nil {
		fmt.Println(err)
		return
	}
	_, err = b.Get(ctx, s.ID)
	fmt.Println("after Terminate:", errors.Is(err, sandbox.ErrNotFound))
	// Output:
	// hello
	// after Terminate: true
}
