package oci

import (
	"fmt"
	"os"
	"os/signal"
	"syscall"
)

// execLaunch is what the exec helper is started with: its launch, on
// fd 4 (see spawn).
type execLaunch struct {
	Root    string  `json:"root"`
	ID      string  `json:"id"`
	Process process `json:"process"`
}

// execHelperMain is the process whose pid `exec --detach` writes to
// --pid-file: it hands its stdio (or, with a terminal, fd 5: the
// terminal's slave, its controlling terminal) to the supervisor for one
// exec, forwards the signals it gets (the shim signals exec'd processes
// by pid) and exits with the process's status. fd 3 is the ready pipe:
// "ok" once the process runs, or the error (exit 1); fd 4 the launch
// (execLaunch), argv[1] the container's id (not read). If the helper
// dies, the supervisor kills the process.
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
	return runExec(l, ready, tty)
}

// runExec runs l.Process in the container and returns its status; ready,
// when not nil, gets "ok" or the error once the supervisor answered.
func runExec(l execLaunch, ready, tty *os.File) int {
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
	c, err := dial(l.Root, l.ID)
	if err != nil {
		report(err.Error())
		return 1
	}
	defer c.Close()
	req := request{Op: "exec", Process: &l.Process}
	fds := []int{0, 1, 2}
	if tty != nil {
		fds = []int{int(tty.Fd())}
		req.Rows, req.Cols = windowSize(tty)
	}
	if err := send(c, req, fds...); err != nil {
		report(err.Error())
		return 1
	}
	var r reply
	if _, err := recv(c, &r); err != nil || r.Error != "" || !r.Started {
		if err == nil {
			err = fmt.Errorf("%s", r.Error)
		}
		report(fmt.Sprintf("exec failed: %v", err))
		return 1
	}
	report("ok")
	done := make(chan int, 1)
	go func() {
		var r reply
		if _, err := recv(c, &r); err != nil || r.Exit == nil {
			done <- 255 // the supervisor ended: the container is gone
			return
		}
		done <- *r.Exit
	}()
	for {
		select {
		case code := <-done:
			return code
		case sig := <-sigs:
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
					_ = send(c, request{Op: "resize", Rows: rows, Cols: cols})
				}
				continue
			}
			_ = send(c, request{Op: "signal", Signal: int(s)})
		}
	}
}
