package main

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/cobra"

	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox"
)

// The supervisor is `tent __supervise ID CREATE-FLAGS...`, started by
// `tent create` in its own session: it owns one long-lived sandbox (its
// init, cgroup and network proxy), listens on the sandbox's control
// socket in the state directory, and writes "ok" (or the error) to fd 3
// once the sandbox is ready. It lives until `tent rm`, SIGTERM, or the
// end of the sandbox's --timeout.
const superviseCmd = "__supervise"

func newSuperviseCmd(g *globalOptions) *cobra.Command {
	o := &createOptions{}
	c := &cobra.Command{
		Use:    superviseCmd + " ID",
		Hidden: true,
		Args:   cobra.ExactArgs(1),
		RunE: func(c *cobra.Command, args []string) error {
			return o.supervise(c, g, args[0])
		},
	}
	o.register(c.Flags())
	return c
}

func (o *createOptions) supervise(c *cobra.Command, g *globalOptions, id string) error {
	ready := os.NewFile(3, "ready")
	fail := func(code int, err error) error {
		fmt.Fprintf(ready, "error %d %s\n", code, err)
		ready.Close()
		return &exitError{code: code}
	}
	cwd, _ := os.Getwd()
	spec, err := buildSpec(c.Flags(), &o.runOptions, os.LookupEnv, cwd, g.logger())
	if err != nil {
		return fail(exitRefused, err)
	}
	log := g.logger()
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	opts := sandbox.ProvisionOptions{Logger: log}
	if o.netLog != "" {
		f, err := os.OpenFile(o.netLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o600)
		if err != nil {
			return fail(exitRefused, fmt.Errorf("--net-log: %w", err))
		}
		defer f.Close()
		opts.NetLog = f
	}
	sb, err := sandbox.Provision(context.Background(), spec, opts)
	if err != nil {
		return fail(sandbox.ExitCode(err), err)
	}
	defer sb.Terminate(context.Background())
	store := g.store()
	sock := store.SocketPath(id)
	_ = os.Remove(sock)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		return fail(exitRefused, fmt.Errorf("control socket: %w", err))
	}
	defer l.Close()
	labels, err := parseLabels(o.labels)
	if err != nil {
		return fail(exitRefused, err)
	}
	rec := &sandbox.Record{ID: id, Name: o.name, Labels: labels, Created: time.Now().UTC(), State: "running",
		Supervisor: os.Getpid(), Socket: sock, Args: argsAfter(os.Args, id), Spec: spec, Protections: sb.Protections()}
	if err := store.Save(rec); err != nil {
		return fail(exitRefused, fmt.Errorf("saving the state record: %w", err))
	}
	defer store.Remove(id)
	fmt.Fprintln(ready, "ok")
	ready.Close()

	stop := make(chan struct{}, 1)
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	go func() {
		for {
			conn, err := l.AcceptUnix()
			if err != nil {
				return
			}
			go serveCtl(conn, sb, store, rec, stop)
		}
	}()
	select {
	case <-sigs:
	case <-stop:
	case <-sb.Done():
	}
	return nil
}

// deniedSince returns the denials in after beyond those in before (what
// happened during one exec, give or take a concurrent one).
func deniedSince(before, after []netpolicy.Denial) []netpolicy.Denial {
	type key struct {
		host   string
		port   int
		reason string
	}
	seen := map[key]int{}
	for _, d := range before {
		seen[key{d.Host, d.Port, d.Reason}] = d.Count
	}
	var out []netpolicy.Denial
	for _, d := range after {
		if n := d.Count - seen[key{d.Host, d.Port, d.Reason}]; n > 0 {
			d.Count = n
			out = append(out, d)
		}
	}
	return out
}

// argsAfter returns the arguments that follow the first occurrence of s.
func argsAfter(argv []string, s string) []string {
	for i, a := range argv {
		if a == s {
			return argv[i+1:]
		}
	}
	return nil
}

// serveCtl answers one CLI connection.
func serveCtl(conn *net.UnixConn, sb *sandbox.Sandbox, store sandbox.Store, rec *sandbox.Record, stop chan<- struct{}) {
	defer conn.Close()
	var req ctlRequest
	fds, err := ctlRecv(conn, &req)
	if err != nil {
		return
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "stdio")
		defer files[i].Close()
	}
	reply := ctlReply{}
	switch req.Op {
	case "exec":
		if len(files) != 3 {
			reply = ctlReply{Code: exitRefused, Error: "exec needs the caller's stdin, stdout and stderr"}
			break
		}
		// The caller going away (Ctrl-C, kill) cancels the exec.
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _, _ = conn.Read(make([]byte, 1)); cancel() }()
		before := sb.NetworkDenied()
		res, err := sb.Exec(ctx, sandbox.ExecRequest{Args: req.Args, Env: req.Env, Dir: req.Dir,
			Timeout: time.Duration(req.Timeout), Stdin: files[0], Stdout: files[1], Stderr: files[2]})
		cancel()
		if err != nil && res == nil {
			reply = ctlReply{Code: sandbox.ExitCode(err), Error: err.Error()}
			break
		}
		reply = ctlReply{Code: res.ExitCode, Signal: res.Signal, TimedOut: res.TimedOut,
			Blocked: netpolicy.Summary(deniedSince(before, sb.NetworkDenied()))}
	case "net":
		if req.Network == nil {
			reply = ctlReply{Code: exitRefused, Error: "net needs a policy"}
			break
		}
		if err := sb.SetNetworkPolicy(*req.Network); err != nil {
			reply = ctlReply{Code: exitRefused, Error: err.Error()}
			break
		}
		rec.Spec.Network = *req.Network
		if err := store.Save(rec); err != nil {
			reply = ctlReply{Code: exitRefused, Error: err.Error()}
		}
	case "rm":
		// Answer first: the caller then waits for this process to exit,
		// which happens once the teardown below is done.
		_ = ctlSend(conn, reply, nil)
		if err := sb.Terminate(context.Background()); err != nil {
			fmt.Fprintf(os.Stderr, "tent: terminating %s: %v\n", rec.ID, err)
		}
		stop <- struct{}{}
		return
	default:
		reply = ctlReply{Code: exitRefused, Error: fmt.Sprintf("unknown operation %q", req.Op)}
	}
	_ = ctlSend(conn, reply, nil)
}
