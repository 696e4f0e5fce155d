package oci

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"syscall"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// exec is runc's exec: a process in a running container, detached
// through the exec helper (whose pid the shim reaps) or in the
// foreground.
func (g *globals) exec(ctx context.Context, args []string) (int, error) {
	var procFile, pidFile, console, cwd string
	var detach, tty bool
	var env stringList
	fl, err := commandFlags("exec", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&procFile, "process", "", "")
		fl.StringVar(&procFile, "p", "", "")
		fl.StringVar(&pidFile, "pid-file", "", "")
		fl.StringVar(&console, "console-socket", "", "")
		fl.StringVar(&cwd, "cwd", "", "")
		fl.Var(&env, "env", "")
		fl.Var(&env, "e", "")
		fl.BoolVar(&detach, "detach", false, "")
		fl.BoolVar(&detach, "d", false, "")
		fl.BoolVar(&tty, "tty", false, "")
		fl.BoolVar(&tty, "t", false, "")
	})
	if err != nil {
		return 1, err
	}
	rest := fl.Args()
	if len(rest) < 1 {
		return 1, errors.New("exec: want a container id")
	}
	id := rest[0]
	rec, err := readRecord(g.root, id)
	if err != nil {
		return 1, err
	}
	if !rec.alive() {
		return 1, errors.New("exec: container not running")
	}
	var sp specs.Process
	switch {
	case procFile != "":
		data, err := readSmall(procFile, maxConfig)
		if err != nil {
			return 1, fmt.Errorf("exec: --process: %w", err)
		}
		if err := json.Unmarshal(data, &sp); err != nil {
			return 1, fmt.Errorf("exec: --process %s: %w", procFile, err)
		}
	case len(rest) > 1:
		// runc exec ID CMD...: the container's process, another command.
		b, err := loadBundle(rec.Bundle)
		if err != nil {
			return 1, err
		}
		sp = *b.Config.Process
		sp.Args, sp.Terminal = rest[1:], tty
	default:
		return 1, errors.New("exec: want --process FILE or a command")
	}
	if cwd != "" {
		sp.Cwd = cwd
	}
	sp.Env = append(sp.Env, env...)
	p, err := convertProcess(&sp, "process")
	if err != nil {
		return 1, err
	}
	if p.Terminal && console == "" && detach {
		return 1, errors.New("exec: a terminal with --detach needs --console-socket")
	}
	l := execLaunch{Root: rootOf(g), ID: id, Process: *p}
	if !detach {
		var t *os.File
		if p.Terminal {
			if !isTerminal(os.Stdin) {
				return 1, errors.New("exec: --tty needs a terminal on stdin, or --console-socket")
			}
			t = os.Stdin
		}
		return runExec(l, nil, t), nil
	}

	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 1, err
	}
	defer readyR.Close()
	arg, _ := json.Marshal(l)
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{execArg0, string(arg)},
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{readyW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	var master, slave *os.File
	if p.Terminal {
		if master, slave, err = openPTY(); err != nil {
			readyW.Close()
			return 1, err
		}
		defer master.Close()
		defer slave.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, slave)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 4
	}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return 1, fmt.Errorf("exec: %w", err)
	}
	msg, _ := pipeMessage(ctx, readyR)
	if msg != "ok" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if msg == "" {
			msg = "exec: the helper ended without a report"
		}
		return 1, errors.New(msg)
	}
	err = writePidFile(pidFile, cmd.Process.Pid)
	if err == nil && master != nil {
		err = sendConsole(console, master)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 1, err
	}
	_ = cmd.Process.Release()
	return 0, nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }
