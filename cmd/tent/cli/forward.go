package cli

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"

	"github.com/spf13/cobra"
)

// ServerBinary is the program that serves tent's APIs: tent serve and
// tent mcp run it in tent's place.
const ServerBinary = "tent-server"

// Short help of the server verbs, shared by tent's forwarders and
// tent-server's commands.
const (
	ServeShort = "Serve an E2B-compatible HTTP API (use tent from the E2B SDKs)"
	MCPShort   = "Serve sandboxes to an AI agent over the Model Context Protocol"
)

// serverForwarders are tent's serve and mcp: each hands the whole command
// line to tent-server, which has the same global flags and verbs. They
// live in their own program because the packages only they need
// (protobuf, Connect, the MCP SDK) would otherwise run their
// initialisers at every tent start, and at every sandbox init's start,
// which re-executes tent.
func serverForwarders(g *Globals) []*cobra.Command {
	forward := func(c *cobra.Command, _ []string) error { return forwardToServer(g) }
	long := func(short, doc string) string {
		return short + ".\n\n" + `This verb is served by tent-server, installed beside tent (go install
github.com/tent-sandbox/tent/cmd/...): tent runs it with the same command
line. Its flags: tent ` + doc + ` --help.`
	}
	return []*cobra.Command{
		{Use: "serve [flags]", Short: ServeShort, Long: long(ServeShort, "serve"), DisableFlagParsing: true, RunE: forward},
		{Use: "mcp [flags]", Short: MCPShort, Long: long(MCPShort, "mcp"), DisableFlagParsing: true, RunE: forward},
	}
}

// forwardToServer replaces tent with tent-server, same arguments, same
// environment, same descriptors: the one beside tent's own binary (the
// pair installed together), else the first on $PATH.
func forwardToServer(g *Globals) error {
	path, err := findServer()
	if err != nil {
		return &exitError{code: exitRefused, msg: err.Error()}
	}
	argv := append([]string{path}, g.args...)
	env := append(os.Environ(), forwardedEnv+"="+Version())
	err = syscall.Exec(path, argv, env)
	return &exitError{code: exitRefused, msg: fmt.Sprintf("running %s: %v", path, err)}
}

// forwardedEnv carries the version of the tent that ran tent-server.
const forwardedEnv = "TENT_FORWARDED_BY"

// checkForwarder warns, in tent-server, when the tent that ran it is of
// another build: the two share the state directory's sandboxes, so they
// should come from one build (a tent-server found on $PATH may not). The
// variable goes no further.
func checkForwarder(w io.Writer) {
	by, ok := os.LookupEnv(forwardedEnv)
	if !ok {
		return
	}
	_ = os.Unsetenv(forwardedEnv)
	if v := Version(); by != v {
		fmt.Fprintf(w, "tent: warning: %s is %s, the tent that ran it %s: install both from one build\n", ServerBinary, v, by)
	}
}

// findServer locates tent-server.
func findServer() (string, error) {
	if exe, err := os.Executable(); err == nil {
		p := filepath.Join(filepath.Dir(exe), ServerBinary)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p, nil
		} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
			return "", fmt.Errorf("%s: %w", p, err)
		}
	}
	if p, err := exec.LookPath(ServerBinary); err == nil {
		return p, nil
	}
	return "", fmt.Errorf("tent serve and tent mcp are served by %s, which is neither beside this tent nor on $PATH: install it (go install github.com/tent-sandbox/tent/cmd/tent-server@latest, or make build, which puts both in bin/)", ServerBinary)
}
