package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	"github.com/tent-sandbox/tent/sandbox"
)

// The Local backend behind the Backend interface: a sandbox is named by
// its id or a unique prefix of it, and a Handle carries its verbs.
func ExampleLocal() {
	ctx := context.Background()
	local, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer local.Close(ctx) // terminates what is left, removes its snapshots
	var b sandbox.Backend = local

	s, err := b.Provision(ctx, sandbox.Spec{Identity: sandbox.Identity{Env: []string{"GREETING=hello"}}})
	if err != nil {
		fmt.Println(err)
		return
	}
	h, err := b.Open(ctx, s.ID[:6])
	if err != nil {
		fmt.Println(err)
		return
	}
	var out bytes.Buffer
	if _, err := h.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo $GREETING"}, Stdout: &out}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(out.String())
	if err := h.Terminate(ctx); err != nil {
		fmt.Println(err)
		return
	}
	_, err = b.Open(ctx, s.ID)
	fmt.Println("after Terminate:", errors.Is(err, sandbox.ErrNotFound))
	// Output:
	// hello
	// after Terminate: true
}
