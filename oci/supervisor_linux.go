package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/reexec"
	"github.com/tent-sandbox/tent/sandbox"
)

// The container's supervisor: the process whose pid create writes to
// --pid-file. create starts it as its child and exits, so that it ends
// up the child of containerd's shim (a subreaper), which learns the
// container's exit status by reaping it: the supervisor exits with the
// main process's status (its code, or 128+N after signal N). It holds
// the sandbox (whose init is its child), runs nothing of the bundle's
// before start, and answers the other commands on its socket.
const (
	supervisorArg0 = "tent-runc-supervisor"
	execArg0       = "tent-runc-exec"
)

func init() {
	reexec.Register(supervisorArg0, supervisorMain)
	reexec.Register(execArg0, execHelperMain)
}

// launch is what the supervisor is started with: its launch, on fd 4
// (see spawn).
type launch struct {
	Root      string `json:"root"`
	ID        string `json:"id"`
	Bundle    string `json:"bundle"`
	Log       string `json:"log,omitempty"`
	LogFormat string `json:"log_format,omitempty"`
	Debug     bool   `json:"debug,omitempty"`
	Terminal  bool   `json:"terminal,omitempty"` // fd 5 is the terminal's slave, its controlling terminal
}

// readyInfo follows "ok\n" on the supervisor's ready pipe.
type readyInfo struct {
	Cgroups []string `json:"cgroups,omitempty"`
	InitPID int      `json:"init_pid"`
	// CgroupsPath are the directories made for linux.cgroupsPath, which
	// the supervisor is in (delete removes them).
	CgroupsPath []string `json:"cgroups_path,omitempty"`
}

// Statuses, as runc names them.
const (
	statusCreated = "created"
	statusRunning = "running"
	statusPaused  = "paused"
	statusStopped = "stopped"
)

// supervisorMain: argv[1] the container's id (not read); fd 0-2 the
// container's stdio (create's); fd 3 the ready pipe, which gets "ok"
// once the sandbox is up and the socket listens, or the error; fd 4 the
// launch (JSON, read to its end); fd 5 the terminal with
// launch.Terminal. Exits with the main process's status; 1 when the
// sandbox could not be made (reported on fd 3).
func supervisorMain() int {
	var l launch
	ready := launched("supervisor", &l)
	if ready == nil {
		return 1
	}
	log, closeLog := openLogger(l.Log, l.LogFormat, l.Debug)
	defer closeLog()
	var tty *os.File
	if l.Terminal {
		tty = os.NewFile(fdTTY, "tty")
	}
	// The container's stdio are the bundle's, never ours to write.
	signal.Ignore(syscall.SIGPIPE)
	return supervise(context.Background(), l, ready, tty, log)
}

// supervisor is one container's state.
type supervisor struct {
	l    launch
	b    *bundle
	sb   *sandbox.Sandbox
	log  *slog.Logger
	tty  *os.File
	exit chan int // the supervisor's exit status, once

	mu       sync.Mutex
	status   string
	killedBy syscall.Signal // a kill that ended the container (its status is 128+N)
	signals  chan os.Signal // to the main process
	resize   chan sandbox.WindowSize
}

func supervise(ctx context.Context, l launch, ready, tty *os.File, log *slog.Logger) int {
	fail := func(err error) int {
		log.Error("create failed", "err", err)
		fmt.Fprint(ready, err.Error())
		ready.Close()
		return 1
	}
	b, err := loadBundle(l.Bundle)
	if err != nil {
		return fail(err)
	}
	for _, ig := range b.Ignored {
		log.Debug("bundle setting left to tent", "setting", ig)
	}
	var cgPath string
	if b.Config.Linux != nil {
		cgPath = b.Config.Linux.CgroupsPath
	}
	joined, err := joinCgroupsPath(cgPath)
	if err != nil {
		return fail(err)
	}
	if len(joined) > 0 {
		failed := fail
		fail = func(err error) int {
			// Leave the cgroups made for us, and remove them: create
			// reports the failure and nobody deletes this container.
			leaveCgroups(joined)
			return failed(err)
		}
	}
	// IdleAfter < 0: the init stays (the shim may call any time).
	sb, err := sandbox.Provision(ctx, b.Spec, sandbox.ProvisionOptions{Logger: log, ID: l.ID, IdleAfter: -1})
	if err != nil {
		// Nothing else is in the cgroups made for it; create removes
		// them once this process is gone.
		return fail(err)
	}
	defer func() {
		if err := sb.Terminate(context.Background()); err != nil {
			log.Error("terminating the sandbox", "err", err)
		}
	}()
	path := sockPath(l.Root, l.ID)
	_ = os.Remove(path) // a stale one of a crashed supervisor
	var ln *net.UnixListener
	err = shortPath(path, func(p string) (err error) {
		ln, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: p, Net: "unixpacket"})
		return err
	})
	if err != nil {
		return fail(fmt.Errorf("failed to listen on %s: %w", path, err))
	}
	// Removed by name: the name it was bound with may have been a
	// descriptor's.
	ln.SetUnlinkOnClose(false)
	defer func() {
		ln.Close()
		_ = os.Remove(path)
	}()

	s := &supervisor{l: l, b: b, sb: sb, log: log, tty: tty, exit: make(chan int, 1), status: statusCreated,
		signals: make(chan os.Signal, 16), resize: make(chan sandbox.WindowSize, 4)}
	if tty != nil {
		s.watchResize()
	}
	go s.serve(ln)
	sbInfo := sb.Info()
	info, _ := json.Marshal(readyInfo{Cgroups: sbInfo.CgroupPaths, InitPID: sbInfo.InitPID, CgroupsPath: joined})
	fmt.Fprintf(ready, "ok\n%s", info)
	ready.Close()
	log.Debug("container created", "id", l.ID, "init", sbInfo.InitPID)

	code := <-s.exit
	s.mu.Lock()
	s.status = statusStopped
	s.mu.Unlock()
	log.Debug("container stopped", "id", l.ID, "status", code)
	return code
}

// watchResize follows the terminal's size: the supervisor leads the
// terminal's session, so the kernel sends it SIGWINCH when the shim
// resizes the master.
func (s *supervisor) watchResize() {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGWINCH, syscall.SIGHUP)
	go func() {
		for sig := range c {
			if sig == syscall.SIGHUP { // the console closed: as a terminal's hang-up
				s.signal(syscall.SIGHUP)
				continue
			}
			if rows, cols := windowSize(s.tty); rows > 0 && cols > 0 {
				select {
				case s.resize <- sandbox.WindowSize{Rows: rows, Cols: cols}:
				default:
				}
			}
		}
	}()
}

func (s *supervisor) serve(ln *net.UnixListener) {
	for {
		c, err := ln.AcceptUnix()
		if err != nil {
			return
		}
		if !peerIsOwner(c) {
			c.Close()
			continue
		}
		go s.handle(c)
	}
}

func (s *supervisor) handle(c *net.UnixConn) {
	defer c.Close()
	_ = c.SetReadDeadline(time.Now().Add(30 * time.Second))
	var req request
	files, err := recv(c, &req)
	if err != nil {
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if req.Op == "exec" {
		s.exec(c, req, files)
		return
	}
	for _, f := range files {
		f.Close()
	}
	r := s.do(req)
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_ = send(c, r)
}

func (s *supervisor) do(req request) reply {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	s.mu.Lock()
	defer s.mu.Unlock()
	fail := func(format string, a ...any) reply { return reply{Error: fmt.Sprintf(format, a...)} }
	switch req.Op {
	case "state":
		return reply{Status: s.status}
	case "start":
		if s.status != statusCreated {
			return fail("cannot start a container that is %s", s.status)
		}
		s.status = statusRunning
		go s.runMain()
		return reply{Status: s.status}
	case "kill":
		sig := syscall.Signal(req.Signal)
		switch {
		case s.status == statusStopped:
			return fail("container not running")
		case s.status == statusCreated:
			// Nothing of the bundle's runs yet: any signal ends it.
			s.status, s.killedBy = statusStopped, sig
			s.exit <- 128 + int(sig)
		case sig == syscall.SIGKILL && req.All:
			s.killedBy = sig
			go func() { _ = s.sb.Terminate(context.Background()) }()
		default:
			if req.All {
				s.signalAll(sig)
			}
			s.signal(sig)
		}
		return reply{}
	case "pause":
		if s.status != statusRunning {
			return fail("cannot pause a container that is %s", s.status)
		}
		if err := s.sb.Suspend(ctx); err != nil {
			return fail("%v", err)
		}
		s.status = statusPaused
		return reply{Status: s.status}
	case "resume":
		if s.status != statusPaused {
			return fail("cannot resume a container that is %s", s.status)
		}
		if err := s.sb.Resume(ctx); err != nil {
			return fail("%v", err)
		}
		s.status = statusRunning
		return reply{Status: s.status}
	case "ps":
		pids, err := s.pids()
		if err != nil {
			return fail("%v", err)
		}
		return reply{Pids: pids}
	}
	return fail("unknown request %q", req.Op)
}

// signal delivers sig to the main process (its process group).
func (s *supervisor) signal(sig syscall.Signal) {
	select {
	case s.signals <- sig:
	default:
		s.log.Warn("signal dropped: too many pending", "signal", sig)
	}
}

// signalAll delivers sig to every process of the container but tent's
// init (kill --all).
func (s *supervisor) signalAll(sig syscall.Signal) {
	pids, _ := s.pids()
	for _, pid := range pids {
		_ = unix.Kill(pid, sig)
	}
}

// pids lists the container's processes (host pids), tent's init left
// out, from the sandbox's cgroup.
func (s *supervisor) pids() ([]int, error) {
	info := s.sb.Info()
	for _, dir := range info.CgroupPaths {
		data, err := readSmall(dir+"/cgroup.procs", 1<<20)
		if err != nil {
			continue
		}
		var pids []int
		for _, f := range strings.Fields(string(data)) {
			if pid, err := strconv.Atoi(f); err == nil && pid != info.InitPID {
				pids = append(pids, pid)
			}
		}
		slices.Sort(pids)
		return pids, nil
	}
	return nil, fmt.Errorf("%w: the container has no cgroup to list its processes from", sandbox.ErrUnsupported)
}

// runMain runs the bundle's process and ends the supervisor with its
// status.
func (s *supervisor) runMain() {
	m := s.b.Main
	req := sandbox.ExecRequest{Args: m.Args, Dir: m.Cwd, Env: m.Env, Signals: s.signals}
	if s.tty != nil {
		rows, cols := windowSize(s.tty)
		req.TTY = &sandbox.Terminal{Size: sandbox.WindowSize{Rows: rows, Cols: cols}, Resize: s.resize}
		req.Stdin, req.Stdout = s.tty, s.tty
	} else {
		req.Stdin, req.Stdout, req.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	res, err := s.sb.Exec(context.Background(), req)
	code := 0
	switch {
	case err != nil && errors.Is(err, sandbox.ErrTerminated):
		s.mu.Lock()
		sig := s.killedBy
		s.mu.Unlock()
		code = 128 + int(syscall.SIGKILL)
		if sig != 0 {
			code = 128 + int(sig)
		}
	case err != nil:
		s.log.Error("the container's process did not start", "err", err)
		code = sandbox.ExitCode(err)
	default:
		code = res.ExitCode
	}
	s.exit <- code
}

// exec runs one process of `tent-runc exec` for the connection c: files
// are its stdio (three) or its terminal (one).
func (s *supervisor) exec(c *net.UnixConn, req request, files []*os.File) {
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	fail := func(err string) { _ = send(c, reply{Error: err}) }
	s.mu.Lock()
	status := s.status
	s.mu.Unlock()
	p := req.Process
	switch {
	case status != statusRunning && status != statusCreated:
		fail("cannot exec in a container that is " + status)
		return
	case p == nil || len(p.Args) == 0:
		fail("exec: no process")
		return
	case p.UID != s.b.Main.UID || p.GID != s.b.Main.GID:
		fail(fmt.Sprintf("exec: user %d:%d differs from the container's (%d:%d): tent runs every process of a container as one user", p.UID, p.GID, s.b.Main.UID, s.b.Main.GID))
		return
	case p.Terminal && len(files) != 1, !p.Terminal && len(files) != 3:
		fail("exec: wrong number of descriptors")
		return
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	signals := make(chan os.Signal, 16)
	resize := make(chan sandbox.WindowSize, 4)
	er := sandbox.ExecRequest{Args: p.Args, Dir: p.Cwd, Env: p.Env, Signals: signals}
	if p.Terminal {
		er.TTY = &sandbox.Terminal{Size: sandbox.WindowSize{Rows: req.Rows, Cols: req.Cols}, Resize: resize}
		er.Stdin, er.Stdout = files[0], files[0]
	} else {
		er.Stdin, er.Stdout, er.Stderr = files[0], files[1], files[2]
	}
	if err := send(c, reply{Started: true}); err != nil {
		return
	}
	// The helper's messages: signals and resizes; its end (it died)
	// kills the process, as the shim expects of the pid it reaps.
	go func() {
		defer cancel()
		for {
			var m request
			fs, err := recv(c, &m)
			for _, f := range fs {
				f.Close()
			}
			if err != nil {
				return
			}
			switch m.Op {
			case "signal":
				select {
				case signals <- syscall.Signal(m.Signal):
				default:
				}
			case "resize":
				select {
				case resize <- sandbox.WindowSize{Rows: m.Rows, Cols: m.Cols}:
				default:
				}
			}
		}
	}()
	res, err := s.sb.Exec(ctx, er)
	code := 0
	if err != nil {
		code = sandbox.ExitCode(err)
		if errors.Is(err, sandbox.ErrTerminated) {
			code = 128 + int(syscall.SIGKILL)
		}
	} else {
		code = res.ExitCode
	}
	_ = c.SetWriteDeadline(time.Now().Add(10 * time.Second))
	_ = send(c, reply{Exit: &code})
}
