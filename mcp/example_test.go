package mcp_test

import (
	"context"
	"fmt"
	"log"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/tent-sandbox/tent/mcp"
	"github.com/tent-sandbox/tent/sandbox"
)

// A server over an in-process backend, and a client session to it over
// an in-memory transport: the first tool call makes the default
// sandbox; Close terminates it.
func Example() {
	ctx := context.Background()
	local, err := sandbox.NewLocal(sandbox.LocalOptions{})
	if err != nil {
		log.Fatal(err)
	}
	defer local.Close(ctx)
	srv, err := mcp.New(local, mcp.Options{Spec: sandbox.Spec{Identity: sandbox.Identity{Hostname: "box"}}})
	if err != nil {
		log.Fatal(err)
	}
	defer srv.Close(ctx)

	clientEnd, serverEnd := sdk.NewInMemoryTransports()
	if _, err := srv.MCPServer().Connect(ctx, serverEnd, nil); err != nil {
		log.Fatal(err)
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "example", Version: "1"}, nil)
	session, err := client.Connect(ctx, clientEnd, nil)
	if err != nil {
		log.Fatal(err)
	}
	defer session.Close()

	res, err := session.CallTool(ctx, &sdk.CallToolParams{Name: "shell",
		Arguments: map[string]any{"command": "echo hello from $(hostname)"}})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Print(res.Content[0].(*sdk.TextContent).Text)
	// Output:
	// exit 0
	// --- stdout ---
	// hello from box
}
