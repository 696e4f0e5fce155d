// Command tent-server serves tent's sandboxes to programs: E2B's API
// (tent serve, docs/serve.md) and the Model Context Protocol (tent mcp,
// docs/mcp.md). tent runs it for those two verbs with the same command
// line, so it is installed beside tent and rarely run by name; run by
// name, it takes tent's command line (tent-server serve --listen ...).
//
// It is a program of its own so that the packages only the servers need
// (protobuf, Connect, the MCP SDK) stay out of tent, whose every start,
// and every sandbox init's, would otherwise run their initialisers.
package main

import (
	"os"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/cmd/tent/cli"
	"github.com/tent-sandbox/tent/sandbox"
)

func main() {
	sandbox.Init() // first: in the re-executed sandbox init this never returns
	os.Exit(cli.Main(os.Args[1:], func(g *cli.Globals) []*cobra.Command {
		return []*cobra.Command{newServeCmd(g), newMCPCmd(g)}
	}))
}
