package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/net/netutil"

	"github.com/tent-sandbox/tent/cmd/tent/cli"
	"github.com/tent-sandbox/tent/mcp"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// mcpOptions are tent mcp's flags: the sandboxes' (as tent create's),
// then the server's.
type mcpOptions struct {
	cli.RunOptions
	listen    string
	token     string
	templates string
	keep      bool
	tlsCert   string
	tlsKey    string
	insecure  bool
}

func newMCPCmd(g *cli.Globals) *cobra.Command {
	o := &mcpOptions{}
	c := &cobra.Command{
		Use:   "mcp [flags]",
		Short: cli.MCPShort,
		Long: `Serve MCP tools (run commands, read, write, edit and search files, background
commands, snapshots, the network policy) that act inside tent sandboxes, so
that an agent works in a sandbox instead of on this machine:

  claude mcp add tent -- tent mcp

The flags of tent create (--ro, --rw, --cow, --net, --allow-host, --memory,
--pids, --timeout, --policy FILE...) fix what every sandbox the agent
creates is; --templates DIR offers further policy files by name, as tent
serve does. The agent picks among them and cannot widen them: no tool
mounts a host path, loosens the network or raises a limit. The first tool
call creates a default sandbox.

Over stdin/stdout by default. With --listen ADDR, over Streamable HTTP
(loopback only unless --tls-cert/--tls-key or --insecure); every request
must carry Authorization: Bearer TOKEN, the token being --token, else
$TENT_MCP_TOKEN, else the one kept in the state directory (mcp-token,
mode 0600, generated the first time).

On exit (the client closes stdin, SIGINT, SIGTERM) the sandboxes the
server made are killed, unless --keep-sandboxes.`,
		Args: cobra.NoArgs,
		RunE: func(c *cobra.Command, _ []string) error {
			return runMCP(c, g, o)
		},
	}
	f := c.Flags()
	o.Register(f)
	_ = f.MarkHidden("report")
	_ = f.MarkHidden("tier")
	f.StringVar(&o.listen, "listen", "", "serve Streamable HTTP on `ADDR` (HOST:PORT) instead of stdio")
	f.StringVar(&o.token, "token", "", "the bearer `TOKEN` HTTP clients must send (default $TENT_MCP_TOKEN, else the state directory's mcp-token)")
	f.StringVar(&o.templates, "templates", "", "`DIR` of further templates the agent may pick: tent policy files named NAME.yaml, .yml or .json")
	f.BoolVar(&o.keep, "keep-sandboxes", false, "leave the sandboxes running when the server stops (tent ls shows them)")
	f.StringVar(&o.tlsCert, "tls-cert", "", "serve HTTPS with the certificate in `FILE` (with --tls-key)")
	f.StringVar(&o.tlsKey, "tls-key", "", "the TLS private key `FILE`")
	f.Lookup("timeout").Usage = "wall-clock limit `DURATION` of each sandbox's whole life, e.g. 30m, 2h"
	f.BoolVar(&o.insecure, "insecure", false, "allow plain HTTP on an address other than loopback (the token and the sandboxes' files cross the network in clear)")
	return c
}

func runMCP(c *cobra.Command, g *cli.Globals, o *mcpOptions) error {
	refuse := func(format string, args ...any) error {
		return cli.Exit(cli.ExitRefused, fmt.Sprintf(format, args...))
	}
	f := c.Flags()
	if f.Changed("report") || f.Changed("tier") {
		return refuse("--report and --tier are tent run's")
	}
	level := slog.LevelWarn
	if g.Verbose() {
		level = slog.LevelDebug
	}
	// stdout is the protocol's over stdio: logs go to stderr only.
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
	cwd, _ := os.Getwd()
	spec, err := cli.BuildSpec(f, &o.RunOptions, os.LookupEnv, cwd, log)
	if err != nil {
		return refuse("%v", err)
	}
	useTLS := o.tlsCert != "" || o.tlsKey != ""
	if useTLS && (o.tlsCert == "" || o.tlsKey == "") {
		return refuse("--tls-cert and --tls-key go together")
	}
	if o.listen == "" && (useTLS || o.insecure || o.token != "") {
		return refuse("--token, --tls-cert, --tls-key and --insecure are for --listen; over stdio the client that starts tent mcp is its only peer")
	}
	if o.listen != "" {
		if err := mcp.CheckListenAddr(o.listen, useTLS, o.insecure); err != nil {
			return refuse("%v", err)
		}
	}
	if o.templates != "" {
		if fi, err := os.Stat(o.templates); err != nil || !fi.IsDir() {
			return refuse("--templates %q: not a directory", o.templates)
		}
	}
	netLog := o.NetLog()
	if netLog != "" {
		if netLog, err = filepath.Abs(netLog); err != nil {
			return refuse("--net-log: %v", err)
		}
	}
	b := g.BackendWith(supervised.Options{Logger: log, NetLog: netLog})
	srv, err := mcp.New(b, mcp.Options{Spec: spec, TemplatesDir: o.templates, Logger: log, Version: cli.Version(), Keep: o.keep})
	if err != nil {
		return refuse("%v", err)
	}
	ctx, stop := signal.NotifyContext(c.Context(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if o.listen == "" {
		err = srv.Run(ctx, &mcp.StdioTransport{Logger: log})
	} else {
		err = serveMCPHTTP(ctx, g, o, srv, useTLS, log)
	}
	cctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if cerr := srv.Close(cctx); cerr != nil {
		err = errors.Join(err, cerr)
	}
	if err != nil && !errors.Is(err, context.Canceled) {
		return cli.Exit(1, err.Error())
	}
	return nil
}

// maxMCPConns bounds tent mcp's HTTP connections at once, as tent
// serve's.
const maxMCPConns = 1024

// serveMCPHTTP serves srv over Streamable HTTP until ctx ends.
func serveMCPHTTP(ctx context.Context, g *cli.Globals, o *mcpOptions, srv *mcp.Server, useTLS bool, log *slog.Logger) error {
	token, hint := o.token, "(the token given)"
	if token == "" {
		token = os.Getenv("TENT_MCP_TOKEN")
	}
	if token == "" {
		t, path, created, err := mcp.LoadOrCreateToken(g.StateDir())
		if err != nil {
			return cli.Exit(cli.ExitRefused, err.Error())
		}
		token, hint = t, "$(cat "+path+")"
		if created {
			log.Warn("generated a bearer token", "file", path)
		}
	}
	l, err := net.Listen("tcp", o.listen)
	if err != nil {
		return cli.Exit(cli.ExitRefused, err.Error())
	}
	scheme := "http"
	if useTLS {
		cert, err := tls.LoadX509KeyPair(o.tlsCert, o.tlsKey)
		if err != nil {
			l.Close()
			return cli.Exit(cli.ExitRefused, fmt.Sprintf("loading the TLS certificate: %v", err))
		}
		l, scheme = tls.NewListener(l, &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}), "https"
	}
	if o.insecure && !useTLS {
		log.Warn("serving plain HTTP on a non-loopback address: the token and the sandboxes' files cross the network in clear", "addr", l.Addr())
	}
	fmt.Fprintf(os.Stderr, "tent mcp: listening on %s://%s/ (send Authorization: Bearer %s)\n", scheme, l.Addr(), hint)
	hs := &http.Server{Handler: srv.Handler(token), ReadHeaderTimeout: 10 * time.Second, MaxHeaderBytes: 64 << 10,
		ErrorLog: slog.NewLogLogger(log.Handler(), slog.LevelDebug)}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(netutil.LimitListener(l, maxMCPConns)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	<-errc
	return nil
}
