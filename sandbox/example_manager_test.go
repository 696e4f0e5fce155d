package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// A Manager hands an agent's tool calls a sandbox from a warm pool,
// tracks the agent's session and terminates sandboxes left idle.
func ExampleManager() {
	ctx := context.Background()
	local, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer local.Close(ctx)
	m, err := sandbox.NewManager(sandbox.ManagerOptions{
		Backends: []sandbox.Backend{local},
		Timeouts: sandbox.Timeouts{Idle: 10 * time.Minute},
		Pool:     []sandbox.WarmSpec{{Spec: sandbox.Spec{Hostname: "agent"}, Size: 1}},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close(ctx) // terminates every sandbox it handed out or keeps warm
	if err := m.WaitPool(ctx); err != nil {
		fmt.Println(err)
		return
	}

	s, err := m.Acquire(ctx, sandbox.AcquireRequest{
		Client: "agent-1",
		Spec:   sandbox.Spec{Hostname: "agent"},
		Labels: map[string]string{"task": "build"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var out bytes.Buffer
	res, err := m.Exec(ctx, s.ID, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo hello from $(hostname)"}, Stdout: &out})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(out.String())
	fmt.Println("pooled:", s.Pooled, "exit code:", res.ExitCode)
	_ = m.Release(ctx, s.ID) // terminated; the pool refills in the background
	fmt.Println("pool hits:", m.Stats().PoolHits)
	// Output:
	// hello from agent
	// pooled: true exit code: 0
	// pool hits: 1
}

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
