package sandbox_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// A long-lived sandbox keeps its state across commands; a non-zero exit
// is a result, not an error.
func ExampleProvision() {
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{Identity: sandbox.Identity{Env: []string{"GREETING=hi"}}}, sandbox.ProvisionOptions{})
	if err != nil {
		fmt.Println(err) // nothing to terminate: no sandbox was made
		return
	}
	defer sb.Terminate(ctx)
	for _, call := range []string{"echo $GREETING > /tmp/f", "cat /tmp/f", "exit 3"} {
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", call}})
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("exit %d: %q\n", res.ExitCode, res.Stdout)
	}
	// Output:
	// exit 0: ""
	// exit 0: "hi\n"
	// exit 3: ""
}

// A command of a long-lived sandbox as an os/exec command: Output, a
// non-zero exit as an *ExitError, a context that kills it.
func ExampleSandbox_Command() {
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Terminate(ctx)
	out, err := sb.Command(ctx, "sh", "-c", "echo built > /tmp/out; cat /tmp/out").Output()
	fmt.Printf("%q %v\n", out, err)
	var ee *sandbox.ExitError
	err = sb.Command(ctx, "sh", "-c", "exit 2").Run()
	fmt.Println(errors.As(err, &ee), ee.ExitCode())
	tctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	err = sb.Command(tctx, "sleep", "300").Run()
	fmt.Println(errors.Is(err, context.DeadlineExceeded))
	// Output:
	// "built\n" <nil>
	// true 2
	// true
}

// Files go in and out through tent's file helper, which runs inside the
// sandbox with its restrictions: a path it cannot reach fails with the
// errno it would get inside.
func ExampleSandbox_WriteFile() {
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Terminate(ctx)
	_, err = sb.WriteFile(ctx, "/tmp/notes", strings.NewReader("draft"), sandbox.WriteOptions{Mode: 0o644})
	if err != nil {
		fmt.Println(err)
		return
	}
	var out bytes.Buffer
	if err := sb.ReadFile(ctx, "/tmp/notes", &out, sandbox.ReadOptions{}); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out.String())
	_, err = sb.WriteFile(ctx, "/usr/bin/evil", strings.NewReader(""), sandbox.WriteOptions{Mode: 0o755})
	fmt.Println(errors.Is(err, syscall.EROFS)) // the system directories are read-only
	// Output:
	// draft
	// true
}

// A snapshot captures a sandbox's writable layers; forks start from it,
// independent of the original and of each other.
func ExampleFork() {
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Terminate(ctx)
	if _, err := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "echo v1 > /tmp/state"}}); err != nil {
		fmt.Println(err)
		return
	}
	dir, _ := os.MkdirTemp("", "tent-snapshots-")
	defer os.RemoveAll(dir)
	snap, err := sb.Snapshot(ctx, dir, sandbox.SnapshotOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	fork, err := sandbox.Fork(ctx, snap, sandbox.ProvisionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer fork.Terminate(ctx)
	res, err := fork.Exec(ctx, sandbox.ExecRequest{Args: []string{"cat", "/tmp/state"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Print(string(res.Stdout))
	// Output: v1
}

// A limited sandbox reaches the allowed hosts through tent's proxy, and
// its rules can be replaced while it runs; the mode is chosen at
// provision time.
func ExampleSandbox_SetNetworkPolicy() {
	ctx := context.Background()
	spec := sandbox.Spec{Networking: sandbox.Networking{Network: sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"example.com"}}}}
	sb, err := sandbox.Provision(ctx, spec, sandbox.ProvisionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Terminate(ctx)
	err = sb.SetNetworkPolicy(ctx, sandbox.NetworkPolicy{Mode: "limited", AllowedHosts: []string{"proxy.golang.org"}})
	fmt.Println(err, sb.Info().Spec.Network.AllowedHosts)
	err = sb.SetNetworkPolicy(ctx, sandbox.NetworkPolicy{Mode: "host"})
	fmt.Println(errors.Is(err, sandbox.ErrUnsupported))
	// Output:
	// <nil> [proxy.golang.org]
	// true
}

// A mount added to a running sandbox is validated as provisioning
// validates mounts and seen by the next command.
func ExampleSandbox_Mount() {
	ctx := context.Background()
	dir, _ := os.MkdirTemp("", "tent-data-")
	defer os.RemoveAll(dir)
	os.Chmod(dir, 0o755)
	os.WriteFile(dir+"/input", []byte("42\n"), 0o644)
	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Terminate(ctx)
	if err := sb.Mount(ctx, sandbox.Mount{Source: dir, Target: "/data", Access: sandbox.ReadOnly}); err != nil {
		fmt.Println(err)
		return
	}
	res, _ := sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c", "cat /data/input; echo x 2>/dev/null > /data/out || echo read-only"}})
	fmt.Printf("%s", res.Stdout)
	err = sb.Mount(ctx, sandbox.Mount{Source: "relative/path", Target: "/x"})
	fmt.Println(errors.Is(err, sandbox.ErrInvalidSpec))
	// Output:
	// 42
	// read-only
	// true
}

// A port of a long-lived sandbox published on the host: each connection
// to it is dialled inside the sandbox (here to python's http.server).
func ExampleSandbox_Publish() {
	ctx := context.Background()
	sb, err := sandbox.Provision(ctx, sandbox.Spec{}, sandbox.ProvisionOptions{})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer sb.Terminate(ctx)
	m, err := sb.Publish(ctx, sandbox.PortMapping{Port: 8000}) // on a free port of 127.0.0.1
	if err != nil {
		fmt.Println(err)
		return
	}
	_, err = sb.Exec(ctx, sandbox.ExecRequest{Args: []string{"sh", "-c",
		"echo hello > /tmp/index.html; setsid python3 -m http.server 8000 -d /tmp >/dev/null 2>&1 &"}})
	if err != nil {
		fmt.Println(err)
		return
	}
	url := fmt.Sprintf("http://127.0.0.1:%d/", m.HostPort)
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url); err == nil { // reset until the server listens
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			fmt.Print(string(body))
			break
		}
	}
	fmt.Println(sb.Info().Spec.Ports[0].Port)
	// Output:
	// hello
	// 8000
}
