package sandbox

import (
	"bytes"
	"context"
	"errors"
	"io"
	"log/slog"
	"sync"

	"github.com/tent-sandbox/tent/netpolicy"
)

// Cmd is a command to run in a fresh sandbox, shaped like os/exec.Cmd:
// set the exported fields, then call Start and Wait, or Run.
type Cmd struct {
	// Spec describes the sandbox.
	Spec Spec
	// Path is the program: a name looked up in the sandbox's PATH, or a
	// path inside the sandbox.
	Path string
	// Args holds the arguments, Args[0] being the program's name.
	Args []string
	// Stdin, Stdout and Stderr are the command's fds 0, 1 and 2. An
	// *os.File is passed as is; any other reader or writer is copied
	// through a pipe; nil means /dev/null.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// NetLog receives the network audit log in limited mode: one JSON line
	// per decision and per closed connection (netpolicy.AuditRecord).
	NetLog io.Writer
	// Resolver resolves the names the network policy allows, on the host;
	// nil means the host's resolver.
	Resolver netpolicy.Resolver
	// ProxyLimits bound what the command can make its network proxy
	// spend in limited mode; the zero value is the defaults.
	ProxyLimits ProxyLimits

	// Report describes the run once Wait has returned; between Start and
	// Wait it holds the protections and the cgroup already in place.
	Report *Report

	ctx context.Context
	mu  sync.Mutex
	run *running // set by Start
}

// Command returns a Cmd that runs name with args in a sandbox built from
// spec. When ctx is done before the command exits, the whole sandbox is
// killed.
func Command(ctx context.Context, spec Spec, name string, args ...string) *Cmd {
	return &Cmd{Spec: spec, Path: name, Args: append([]string{name}, args...), ctx: ctx}
}

// Run starts the command and waits for it.
func (c *Cmd) Run() error {
	if err := c.Start(); err != nil {
		return err
	}
	return c.Wait()
}

// Output runs the command and returns its standard output.
func (c *Cmd) Output() ([]byte, error) {
	if c.Stdout != nil {
		return nil, errors.New("sandbox: Stdout already set")
	}
	var b bytes.Buffer
	c.Stdout = &b
	err := c.Run()
	return b.Bytes(), err
}

func (c *Cmd) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.New(slog.DiscardHandler)
}

func (c *Cmd) context() context.Context {
	if c.ctx != nil {
		return c.ctx
	}
	return context.Background()
}
