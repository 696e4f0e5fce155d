package oci

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// execArgs are exec's flags and arguments.
type execArgs struct {
	id                              string
	procFile, pidFile, console, cwd string
	detach, tty                     bool
	env                             stringList
	command                         []string // runc exec ID CMD...
}

// exec is runc's exec: a process in a running container, detached
// through the exec helper (whose pid the shim reaps) or in the
// foreground.
func (g *globals) exec(ctx context.Context, args []string) (int, error) {
	a, err := g.execArgs(args)
	if err != nil {
		return 1, err
	}
	if err := validID(a.id); err != nil {
		return 1, err
	}
	c, err := openContainer(ctx, rootOf(g), a.id)
	if err != nil {
		return 1, err
	}
	if st := c.status(ctx); st != statusRunning && st != statusCreated {
		if st == statusStopped {
			return 1, errors.New("exec: container not running")
		}
		return 1, fmt.Errorf("cannot exec in a container that is %s", st)
	}
	p, err := a.process(c.rec)
	if err != nil {
		return 1, err
	}
	if p.Terminal && a.console == "" && a.detach {
		return 1, errors.New("exec: a terminal with --detach needs --console-socket")
	}
	l := execLaunch{Root: rootOf(g), ID: a.id, Process: *p}
	if !a.detach {
		var t *os.File
		if p.Terminal {
			if !isTerminal(os.Stdin) {
				return 1, errors.New("exec: --tty needs a terminal on stdin, or --console-socket")
			}
			t = os.Stdin
		}
		return runExec(ctx, l, nil, t), nil
	}
	if err := execDetached(ctx, l, a); err != nil {
		return 1, err
	}
	return 0, nil
}

// execArgs parses exec's command line.
func (g *globals) execArgs(args []string) (execArgs, error) {
	var a execArgs
	fl, err := commandFlags("exec", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&a.procFile, "process", "", "")
		fl.StringVar(&a.procFile, "p", "", "")
		fl.StringVar(&a.pidFile, "pid-file", "", "")
		fl.StringVar(&a.console, "console-socket", "", "")
		fl.StringVar(&a.cwd, "cwd", "", "")
		fl.Var(&a.env, "env", "")
		fl.Var(&a.env, "e", "")
		fl.BoolVar(&a.detach, "detach", false, "")
		fl.BoolVar(&a.detach, "d", false, "")
		fl.BoolVar(&a.tty, "tty", false, "")
		fl.BoolVar(&a.tty, "t", false, "")
	})
	if err != nil {
		return a, err
	}
	rest := fl.Args()
	if len(rest) < 1 {
		return a, errors.New("exec: want a container id")
	}
	a.id, a.command = rest[0], rest[1:]
	return a, nil
}

// process is the process to run in the container rec: --process, or
// the container's own process with another command; with --cwd and
// --env applied.
func (a execArgs) process(rec *record) (*process, error) {
	var sp specs.Process
	switch {
	case a.procFile != "":
		data, err := readSmall(a.procFile, maxConfig)
		if err != nil {
			return nil, fmt.Errorf("exec: --process: %w", err)
		}
		if err := json.Unmarshal(data, &sp); err != nil {
			return nil, fmt.Errorf("exec: --process %s: %w", a.procFile, err)
		}
	case len(a.command) > 0:
		// runc exec ID CMD...: the container's process, another command.
		b, err := loadBundle(rec.Bundle)
		if err != nil {
			return nil, err
		}
		sp = *b.Config.Process
		sp.Args, sp.Terminal = a.command, a.tty
	default:
		return nil, errors.New("exec: want --process FILE or a command")
	}
	if a.cwd != "" {
		sp.Cwd = a.cwd
	}
	sp.Env = append(sp.Env, a.env...)
	return convertProcess(&sp, "process")
}

// execDetached runs l through the exec helper, this process's child
// (its launch on a pipe, never its command line: the process's
// arguments and environment are no other user's to read), once the
// helper reports the process started: its pid goes to --pid-file, its
// terminal's master to --console-socket, and the helper to our parent
// (the shim), which reaps it.
func execDetached(ctx context.Context, l execLaunch, a execArgs) error {
	s, err := spawn(ctx, child{arg0: execArg0, id: l.ID, launch: l, terminal: l.Process.Terminal})
	if err != nil {
		return fmt.Errorf("exec: %w", err)
	}
	if s.report != "ok" {
		s.abort()
		return s.failure("exec: the helper ended without a report")
	}
	err = writePidFile(a.pidFile, s.cmd.Process.Pid)
	if err == nil && s.master != nil {
		err = sendConsole(a.console, s.master)
	}
	if err != nil {
		s.abort()
		return err
	}
	s.release()
	return nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
