// Command tent runs untrusted commands in a Linux-native sandbox.
//
//	tent run [flags] -- CMD [ARGS...]   run one command in a fresh sandbox
//	tent create, exec, ls, rm ...      long-lived sandboxes
//	tent doctor [--json]               check what this host can enforce
//	tent version                       print the version
//
// tent serve and tent mcp are tent-server's (cmd/tent-server): tent runs
// it with the same command line. Invoked as tent-runc, tent speaks runc's
// command line (docs/oci.md).
//
// Exit statuses of tent run: the command's own; 128+N when it was killed
// by signal N; 124 on timeout; 125 when tent itself failed or refused (bad
// flag or value, bad policy, host cannot enforce); 126 when the command
// was found but is not executable; 127 when it was not found.
package main

import (
	"context"
	"os"
	"path/filepath"

	"github.com/tent-sandbox/tent/cmd/tent/cli"
	"github.com/tent-sandbox/tent/oci"
	"github.com/tent-sandbox/tent/sandbox"
)

func main() {
	sandbox.Init() // first: in the re-executed sandbox init this never returns
	if len(os.Args) > 0 && filepath.Base(os.Args[0]) == oci.Arg0 {
		// Installed as tent-runc: runc's command line (docs/oci.md).
		os.Exit(oci.Main(context.Background(), os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	os.Exit(cli.Main(os.Args[1:], nil))
}
