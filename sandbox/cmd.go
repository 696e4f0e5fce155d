package sandbox

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"sync"
	"time"

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
	// *os.File is passed as is when the sandbox's user could reopen it by
	// path (/dev/stdout, /proc/self/fd/N), and otherwise relayed through
	// a pipe that user owns (a root caller's pipes and files, sockets:
	// see "How the command's stdio can be reopened" in the package doc);
	// any other reader or writer is copied through such a pipe; nil
	// means /dev/null.
	Stdin  io.Reader
	Stdout io.Writer
	Stderr io.Writer
	// TTY, when set, runs the command on a new terminal inside the
	// sandbox (see [Terminal]): Stdin is copied into it and its output
	// into Stdout; Stderr is unused, and the sandbox's init gets
	// /dev/null instead of the caller's descriptors.
	TTY *Terminal
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

	// Cancel, for a command of a long-lived sandbox ([Sandbox.Command]),
	// is called when the context ends before the command has, as
	// os/exec's Cmd.Cancel: nil kills the command's session. A one-shot
	// Cmd's context always ends its whole sandbox.
	Cancel func() error
	// WaitDelay, for a command of a long-lived sandbox, bounds the wait
	// after Cancel: a command still running that long after is killed
	// (its session), as os/exec's Cmd.WaitDelay bounds it. Zero waits for
	// the command however long it takes.
	WaitDelay time.Duration

	ctx context.Context
	mu  sync.Mutex
	run *running // set by Start

	sb         *Sandbox // the long-lived sandbox of Sandbox.Command
	proc       *Job     // its command, once started
	stopCancel func() bool
	delay      *time.Timer
}

// Command returns a Cmd that runs name with args in the running sandbox
// s, as os/exec's Command runs it on the host: Start, Wait, Run, Output,
// Signal, SetNetworkPolicy (the sandbox's), Cancel and WaitDelay. Of the
// Cmd's fields, Path and Args, Stdin, Stdout and Stderr (nil: nothing,
// as os/exec's), TTY, Spec.Env (layered over the sandbox's environment)
// and Spec.Workdir (the command's directory) apply; the rest is the
// sandbox's own. Wait leaves the sandbox running; a non-zero exit is an
// [*ExitError]. ctx ending kills the command (see Cancel).
func (s *Sandbox) Command(ctx context.Context, name string, args ...string) *Cmd {
	c := Command(ctx, Spec{}, name, args...)
	c.sb = s
	return c
}

// Command returns a Cmd that runs name with args in a sandbox built from
// spec. When ctx is done before the command exits, the whole sandbox is
// killed and Wait returns an error that wraps ctx.Err() (errors.Is with
// context.DeadlineExceeded or context.Canceled), as os/exec does.
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

// Output runs the command and returns its standard output. When Stderr
// is nil, the command's standard error is captured too (its first and
// last 32 KiB at most) and an [*ExitError] carries it in its Stderr
// field, as os/exec does.
func (c *Cmd) Output() ([]byte, error) {
	if c.Stdout != nil {
		return nil, errors.New("sandbox: Stdout already set")
	}
	var b bytes.Buffer
	c.Stdout = &b
	var saved *prefixSuffixSaver
	if c.Stderr == nil && c.TTY == nil {
		saved = &prefixSuffixSaver{N: 32 << 10}
		c.Stderr = saved
	}
	err := c.Run()
	var ee *ExitError
	if saved != nil && errors.As(err, &ee) {
		ee.Stderr = saved.Bytes()
	}
	return b.Bytes(), err
}

// prefixSuffixSaver keeps the first and the last N bytes written to it
// (os/exec's type of the same name).
type prefixSuffixSaver struct {
	N         int
	prefix    []byte
	suffix    []byte // a ring of N bytes once full
	suffixOff int
	skipped   int64
}

func (w *prefixSuffixSaver) Write(p []byte) (int, error) {
	n := len(p)
	if room := w.N - len(w.prefix); room > 0 {
		k := min(room, len(p))
		w.prefix = append(w.prefix, p[:k]...)
		p = p[k:]
	}
	if len(p) > w.N {
		w.skipped += int64(len(p) - w.N)
		p = p[len(p)-w.N:]
	}
	if room := w.N - len(w.suffix); room > 0 {
		k := min(room, len(p))
		w.suffix = append(w.suffix, p[:k]...)
		p = p[k:]
	}
	for len(p) > 0 {
		k := copy(w.suffix[w.suffixOff:], p)
		p = p[k:]
		w.skipped += int64(k)
		w.suffixOff += k
		if w.suffixOff == w.N {
			w.suffixOff = 0
		}
	}
	return n, nil
}

// Bytes returns what was kept, with a note of how much was left out.
func (w *prefixSuffixSaver) Bytes() []byte {
	if w.suffix == nil {
		return w.prefix
	}
	if w.skipped == 0 {
		return append(append([]byte(nil), w.prefix...), w.suffix...)
	}
	var b bytes.Buffer
	b.Write(w.prefix)
	fmt.Fprintf(&b, "\n... omitting %d bytes ...\n", w.skipped)
	b.Write(w.suffix[w.suffixOff:])
	b.Write(w.suffix[:w.suffixOff])
	return b.Bytes()
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
