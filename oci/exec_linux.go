package oci

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/tent-sandbox/tent/internal/reexec"
	"github.com/tent-sandbox/tent/sandbox"
)

// execArg0 is the exec helper's mode: the process whose pid exec
// --detach writes to --pid-file.
const execArg0 = "tent-runc-exec"

func init() { reexec.Register(execArg0, execHelperMain) }

// execLaunch is what the exec helper is started with: its launch, on
// fd 4 (see spawn).
type execLaunch struct {
	Root    string  `json:"root"`
	ID      string  `json:"id"`
	Process process `json:"process"`
}

// execHelperMain is the process whose pid `exec --detach` writes to
// --pid-file: it runs one exec in the container's sandbox over its
// supervisor's socket, with its own stdio (or, with a terminal, fd 5:
// the terminal's slave, its controlling terminal) passed as they are,
// forwards the signals it gets (the shim signals exec'd processes by
// pid) and exits with the process's status. fd 3 is the ready pipe:
// "ok" once the exec is sent, or the error (exit 1); fd 4 the launch
// (execLaunch), argv[1] the container's id (not read). If the helper
// dies, its connection closes and the supervisor kills the process.
func execHelperMain() int {
	var l execLaunch
	ready := launched("exec", &l)
	if ready == nil {
		return 1
	}
	var tty *os.File
	if l.Process.Terminal {
		tty = os.NewFile(fdTTY, "tty")
	}
	return runExec(context.Background(), l, ready, tty)
}

// runExec runs l.Process in the container and returns its status; ready,
// when not nil, gets "ok" or the error once the exec is under way.
func runExec(ctx context.Context, l execLaunch, ready, tty *os.File) int {
	report := func(msg string) {
		if ready != nil {
			fmt.Fprint(ready, msg)
			ready.Close()
		} else if msg != "ok" {
			fmt.Fprintln(os.Stderr, "tent-runc:", msg)
		}
	}
	signal.Ignore(syscall.SIGPIPE)
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs)
	defer signal.Stop(sigs)
	c, err := openContainer(ctx, l.Root, l.ID)
	if err != nil {
		report(err.Error())
		return 1
	}
	p := l.Process
	fwd := make(chan os.Signal, 16)
	er := sandbox.ExecRequest{Args: p.Args, Env: p.Env, Dir: p.Cwd, Signals: fwd,
		User: &sandbox.User{UID: p.UID, GID: p.GID, Groups: p.Groups}, Capabilities: p.Caps, AmbientCapabilities: p.Ambient}
	var resize chan sandbox.WindowSize
	if tty != nil {
		resize = make(chan sandbox.WindowSize, 4)
		rows, cols := windowSize(tty)
		er.TTY = &sandbox.Terminal{Size: sandbox.WindowSize{Rows: rows, Cols: cols}, Resize: resize}
		er.Stdin, er.Stdout = tty, tty
	} else {
		er.Stdin, er.Stdout, er.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	done := make(chan struct{})
	defer close(done)
	go forwardSignals(sigs, fwd, resize, tty, done)
	report("ok")
	res, err := c.sb.Exec(ctx, er)
	switch {
	case err == nil:
		return res.ExitCode
	case errors.Is(err, sandbox.ErrTerminated), errors.Is(err, sandbox.ErrStopped):
		return 128 + int(syscall.SIGKILL) // the container is gone
	}
	fmt.Fprintln(os.Stderr, "tent-runc: exec:", err)
	return sandbox.ExitCode(err)
}

// forwardSignals passes the signals this process gets to the exec'd
// process (fwd), and, with a terminal, its resizes (SIGWINCH), until
// done.
func forwardSignals(sigs <-chan os.Signal, fwd chan<- os.Signal, resize chan<- sandbox.WindowSize, tty *os.File, done <-chan struct{}) {
	for {
		var sig os.Signal
		select {
		case <-done:
			return
		case sig = <-sigs:
		}
		s, ok := sig.(syscall.Signal)
		if !ok {
			continue
		}
		switch s {
		case syscall.SIGCHLD, syscall.SIGURG, syscall.SIGPIPE:
			continue // the runtime's own, or not meant for the process
		case syscall.SIGWINCH:
			if tty != nil {
				rows, cols := windowSize(tty)
				select {
				case resize <- sandbox.WindowSize{Rows: rows, Cols: cols}:
				default:
				}
			}
			continue
		}
		select {
		case fwd <- s:
		default:
		}
	}
}
