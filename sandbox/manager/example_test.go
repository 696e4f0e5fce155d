package manager_test

import (
	"bytes"
	"context"
	"fmt"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/manager"
)

// A Manager hands an agent's tool calls a sandbox from a warm pool,
// tracks the agent's lease and terminates sandboxes left idle.
func Example() {
	ctx := context.Background()
	local, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer local.Close(ctx)
	m, err := manager.New(manager.Options{
		Backends: []sandbox.Backend{local},
		Timeouts: manager.Timeouts{Idle: 10 * time.Minute},
		Pool:     []manager.WarmSpec{{Spec: sandbox.Spec{Identity: sandbox.Identity{Hostname: "agent"}}, Size: 1}},
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

	lease, err := m.Acquire(ctx, manager.AcquireRequest{
		Client: "agent-1",
		Spec:   sandbox.Spec{Identity: sandbox.Identity{Hostname: "agent"}},
		Labels: map[string]string{"task": "build"},
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	var out bytes.Buffer
	res, err := m.Exec(ctx, lease.ID, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo hello from $(hostname)"}, Stdout: &out})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(out.String())
	fmt.Println("pooled:", lease.Pooled, "exit code:", res.ExitCode)
	_ = m.Release(ctx, lease.ID) // terminated; the pool refills in the background
	fmt.Println("pool hits:", m.Stats().PoolHits)
	// Output:
	// hello from agent
	// pooled: true exit code: 0
	// pool hits: 1
}
