package supervised

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/sandbox"
)

// A child supervisor ([Backend.LaunchChild]) is the launch mode of a
// runtime that is started and waited on by a parent which learns a
// container's end by reaping one pid (containerd's runc shim, through
// tent-runc): the supervisor is the caller's child (the caller exits and
// leaves it to its own parent, a subreaper), its stdio are the
// container's, and the sandbox exists for one main command, held until
// [Sandbox.StartMain]; when that command ends the supervisor tears the
// sandbox down, keeps its record (stopped) and exits with the command's
// status (its code, or 128+N for signal N). Everything else is the
// ordinary supervisor: the record and socket in the state directory, the
// peer check, the process table, the sentinel errors.
//
// Its descriptors: 0-2 the container's stdio (the caller's, or
// /dev/null with a terminal), 3 the ready pipe, 4 the launch (as every
// supervisor's), fdChildLog its log (the sandbox's log file, locked),
// and with a terminal fdChildTTY, its controlling terminal, which the
// main command runs on.
const (
	fdChildLog = 5
	fdChildTTY = 6
)

// mainCommand is a child supervisor's main command (launch.Main).
type mainCommand struct {
	Args []string `json:"args"`
	Env  []string `json:"env,omitempty"`
	Dir  string   `json:"dir,omitempty"`
	// TTY: it runs on the supervisor's terminal (fdChildTTY).
	TTY bool `json:"tty,omitempty"`
	// CgroupsPath is ChildLaunch.CgroupsPath.
	CgroupsPath string `json:"cgroups_path,omitempty"`
	// ParentReaps and ShareIPC are ChildLaunch's.
	ParentReaps bool `json:"parent_reaps,omitempty"`
	ShareIPC    bool `json:"share_ipc,omitempty"`
	// PIDNSFD, when > 0, is the descriptor the supervisor has
	// ChildLaunch.PIDNamespace on (childIO.setup places it).
	PIDNSFD int `json:"pid_ns_fd,omitempty"`
	// Sysfs is ChildLaunch.Sysfs.
	Sysfs bool `json:"sysfs,omitempty"`
}

// ChildLaunch is what [Backend.LaunchChild] starts.
type ChildLaunch struct {
	// Spec is the sandbox's.
	Spec sandbox.Spec
	// Args, Env and Dir are the main command's (as in
	// [sandbox.ExecRequest]).
	Args []string
	Env  []string
	Dir  string
	// Stdin, Stdout and Stderr are the supervisor's stdio, which the main
	// command gets (nil: this process's own).
	Stdin, Stdout, Stderr *os.File
	// Terminal, when not nil, is a terminal's slave: the supervisor's
	// controlling terminal (its stdio are then /dev/null), on which the
	// main command runs; its resizes (SIGWINCH) follow.
	Terminal *os.File
	// Start starts the supervisor's command (nil: cmd.Start), e.g. from
	// a thread that joined another network namespace.
	Start func(cmd *exec.Cmd) error
	// CgroupsPath, when not "", is a cgroup (an OCI bundle's
	// linux.cgroupsPath, cgroupfs form) the supervisor joins before it
	// makes the sandbox, whose cgroup is then beneath it (see
	// cgroups.JoinPath); the levels it made go when the sandbox is
	// terminated.
	CgroupsPath string
	// ParentReaps makes the sandbox's init a child of this process too
	// (sandbox.ProvisionOptions.ParentReaps), beside the supervisor: it
	// exits with the main command's status once the sandbox is torn
	// down, so a parent that learns a container's end by reaping one pid
	// (containerd's shim, once this process has exited) can be given
	// [Child.Info].InitPID, which is in the sandbox's namespaces and
	// cgroup, as runc's container process is. This process must then
	// exit (or reap what it does not know of) once it has launched.
	ParentReaps bool
	// ShareIPC keeps the sandbox in the supervisor's IPC namespace
	// (sandbox.ProvisionOptions.ShareIPC): Start joined a pod's.
	ShareIPC bool
	// PIDNamespace, when not nil, is a pod's pid namespace for the
	// sandbox's init (sandbox.ProvisionOptions.PIDNamespace), passed to
	// the supervisor as a descriptor. The caller keeps and closes it.
	PIDNamespace *os.File
	// Sysfs gives the sandbox a read-only /sys of its network namespace
	// (sandbox.ProvisionOptions.Sysfs).
	Sysfs bool
}

// Child is a supervisor started by [Backend.LaunchChild]: this
// process's child until it is released.
type Child struct {
	// Info describes its sandbox, as it was made.
	Info sandbox.Info
	// CgroupsPath are the cgroup directories made for
	// ChildLaunch.CgroupsPath, which the supervisor is in.
	CgroupsPath []string
	cmd         *exec.Cmd
}

// Pid is the supervisor's pid.
func (c *Child) Pid() int { return c.cmd.Process.Pid }

// Wait waits for the supervisor to exit and returns its status: the
// main command's (128+N for death by signal N).
func (c *Child) Wait() (int, error) {
	err := c.cmd.Wait()
	var ee *exec.ExitError
	if err != nil && !errors.As(err, &ee) {
		return 0, err
	}
	ws := c.cmd.ProcessState.Sys().(syscall.WaitStatus)
	if ws.Signaled() {
		return 128 + int(ws.Signal()), nil
	}
	return ws.ExitStatus(), nil
}

// Release leaves the supervisor to this process's parent once this
// process exits (a subreaper reaps it).
func (c *Child) Release() error { return c.cmd.Process.Release() }

// LaunchChild provisions a sandbox under a supervisor started as this
// process's child (see [ChildLaunch]), and returns once it serves. The
// main command does not run until [Sandbox.StartMain]. A failure leaves
// no process and no record.
func (b *Backend) LaunchChild(ctx context.Context, cl ChildLaunch) (*Child, error) {
	if len(cl.Args) == 0 {
		return nil, fmt.Errorf("%w: a child supervisor needs a main command", sandbox.ErrInvalidSpec)
	}
	cio := &childIO{stdin: cl.Stdin, stdout: cl.Stdout, stderr: cl.Stderr, tty: cl.Terminal, pidNS: cl.PIDNamespace, start: cl.Start}
	id := newID()
	var err error
	if cl.Spec.Network.Secrets, err = b.storeInline(id, cl.Spec.Network.Secrets); err != nil {
		return nil, err
	}
	o := launch{ID: id, Spec: cl.Spec,
		Main: &mainCommand{Args: cl.Args, Env: cl.Env, Dir: cl.Dir, TTY: cl.Terminal != nil, CgroupsPath: cl.CgroupsPath, ParentReaps: cl.ParentReaps, ShareIPC: cl.ShareIPC, Sysfs: cl.Sysfs}}
	info, err := b.spawnWith(ctx, o, cio)
	if err != nil {
		return nil, err
	}
	return &Child{Info: info, CgroupsPath: cio.cgroupsPath, cmd: cio.cmd}, nil
}

// childIO is how a child supervisor is started: its stdio, its
// terminal, its start; cmd is set once it runs.
type childIO struct {
	stdin, stdout, stderr, tty *os.File
	pidNS                      *os.File
	start                      func(*exec.Cmd) error
	cmd                        *exec.Cmd
	cgroupsPath                []string // once it runs: the record's CgroupParents
}

// setup gives cmd the child's descriptors, beside the ready and launch
// pipes (fds 3 and 4) already in cmd.ExtraFiles, and tells main (the
// launch's, sent after) where the ones without a fixed number are.
func (c *childIO) setup(cmd *exec.Cmd, logFile *os.File, main *mainCommand) {
	cmd.Stdin, cmd.Stdout, cmd.Stderr = c.stdin, c.stdout, c.stderr
	if c.stdin == nil {
		cmd.Stdin = os.Stdin
	}
	if c.stdout == nil {
		cmd.Stdout = os.Stdout
	}
	if c.stderr == nil {
		cmd.Stderr = os.Stderr
	}
	cmd.ExtraFiles = append(cmd.ExtraFiles, logFile)
	if c.tty != nil {
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
		cmd.ExtraFiles = append(cmd.ExtraFiles, c.tty)
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, fdChildTTY
	}
	if c.pidNS != nil {
		cmd.ExtraFiles = append(cmd.ExtraFiles, c.pidNS)
		main.PIDNSFD = 3 + len(cmd.ExtraFiles) - 1
	}
}

// MainState is the state of a child supervisor's main command.
type MainState string

// A main command is created (not started yet), running, or exited.
const (
	MainCreated MainState = "created"
	MainRunning MainState = "running"
	MainExited  MainState = "exited"
)

// StartMain starts the main command of a sandbox made by
// [Backend.LaunchChild]: once only (sandbox.ErrInvalidSpec after);
// a sandbox without one is sandbox.ErrUnsupported.
func (s *Sandbox) StartMain(ctx context.Context) error {
	return s.simple(ctx, request{Op: opMainStart})
}

// SignalMain delivers sig to the main command (its process group);
// ErrNoProcess when it has exited. A main command not started yet never
// runs: the sandbox ends, and its supervisor exits with 128+sig.
func (s *Sandbox) SignalMain(ctx context.Context, sig syscall.Signal) error {
	return s.simple(ctx, request{Op: opMainSignal, Signal: int(sig)})
}

// MainState reports the state of the main command.
func (s *Sandbox) MainState(ctx context.Context) (MainState, error) {
	rec, err := s.dialRec()
	if err != nil {
		return "", err
	}
	rep, err := call(ctx, rec, request{Op: opMainState}, nil)
	return MainState(rep.Main), err
}

// mainRun is a child supervisor's main command, in the supervisor.
type mainRun struct {
	cmd     mainCommand
	tty     *os.File
	signals chan os.Signal
	done    chan struct{} // closed when it has exited; code is then set
	code    int

	mu      sync.Mutex
	started bool
}

func newMainRun(cmd mainCommand) *mainRun {
	m := &mainRun{cmd: cmd, signals: make(chan os.Signal, 16), done: make(chan struct{})}
	if cmd.TTY {
		m.tty = os.NewFile(fdChildTTY, "tty")
	}
	return m
}

// exited is closed once the main command has exited (never for a nil
// m, the supervisor of an ordinary sandbox).
func (m *mainRun) exited() <-chan struct{} {
	if m == nil {
		return nil
	}
	return m.done
}

// exitCode is the child supervisor's exit status once it has served:
// the main command's status; 128+SIGKILL when the sandbox ended first
// (its main command then dies with it). 0 for an ordinary supervisor.
func (m *mainRun) exitCode() int {
	if m == nil {
		return 0
	}
	m.mu.Lock()
	started := m.started
	m.mu.Unlock()
	if started {
		<-m.done // the sandbox is torn down: its Exec returns
		return m.code
	}
	return 128 + int(syscall.SIGKILL)
}

// initStatus is the status the sandbox's init exits with when the
// sandbox ends, with ChildLaunch.ParentReaps: the main command's once it
// has exited (255 when it does not fit), else 128+SIGKILL (it dies with
// the sandbox). It never blocks: the sandbox's end is what ends a
// running main command.
func (m *mainRun) initStatus() int {
	select {
	case <-m.done:
		return min(max(m.code, 0), 255)
	default:
		return 128 + int(syscall.SIGKILL)
	}
}

// hangupFunc is what a SIGHUP of the supervisor does: with a terminal
// (the console closed), the main command gets it; nil otherwise (it ends
// the supervision, as any supervisor's).
func (m *mainRun) hangupFunc() func() {
	if m == nil || m.tty == nil {
		return nil
	}
	return func() {
		if m.state() == MainRunning {
			select {
			case m.signals <- syscall.SIGHUP:
			default:
			}
		}
	}
}

// state is the main command's.
func (m *mainRun) state() MainState {
	m.mu.Lock()
	defer m.mu.Unlock()
	select {
	case <-m.done:
		return MainExited
	default:
	}
	if m.started {
		return MainRunning
	}
	return MainCreated
}

// serveMain answers a request on the main command.
func (s *server) serveMain(req request, rep *reply) error {
	m := s.main
	if m == nil {
		return fmt.Errorf("%w: sandbox %s has no main command (it was not made by LaunchChild)", sandbox.ErrUnsupported, s.rec.ID)
	}
	switch req.Op {
	case opMainState:
		rep.Main = string(m.state())
		return nil
	case opMainSignal:
		if req.Signal <= 0 || req.Signal > 64 {
			return fmt.Errorf("%w: signal %d: want 1-64", sandbox.ErrInvalidSpec, req.Signal)
		}
		m.mu.Lock()
		if !m.started {
			// It never runs: the sandbox ends, and the supervisor exits
			// with 128+N (as runc's kill of a created container).
			m.started, m.code = true, 128+req.Signal
			close(m.done)
			m.mu.Unlock()
			return nil
		}
		m.mu.Unlock()
		if m.state() != MainRunning {
			return fmt.Errorf("%w: the main command is not running", ErrNoProcess)
		}
		select {
		case m.signals <- syscall.Signal(req.Signal):
			return nil
		default:
			return fmt.Errorf("too many signals pending for the main command")
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.started {
		return fmt.Errorf("%w: the main command was started already", sandbox.ErrInvalidSpec)
	}
	m.started = true
	go m.run(s.sb)
	return nil
}

// run runs the main command with the supervisor's stdio (or terminal)
// and records its status.
func (m *mainRun) run(sb *sandbox.Sandbox) {
	defer close(m.done)
	req := sandbox.ExecRequest{Args: m.cmd.Args, Dir: m.cmd.Dir, Env: m.cmd.Env, Signals: m.signals}
	if m.tty != nil {
		resize := make(chan sandbox.WindowSize, 4)
		stop := watchResize(m.tty, resize)
		defer stop()
		req.TTY = &sandbox.Terminal{Size: windowSize(m.tty), Resize: resize}
		req.Stdin, req.Stdout = m.tty, m.tty
	} else {
		req.Stdin, req.Stdout, req.Stderr = os.Stdin, os.Stdout, os.Stderr
	}
	res, err := sb.Exec(context.Background(), req)
	switch {
	case err == nil:
		m.code = res.ExitCode
	case errors.Is(err, sandbox.ErrTerminated):
		m.code = 128 + int(syscall.SIGKILL)
	default:
		m.code = sandbox.ExitCode(err)
	}
}

// windowSize is f's terminal's size (zero when unknown).
func windowSize(f *os.File) sandbox.WindowSize {
	ws, err := unix.IoctlGetWinsize(int(f.Fd()), unix.TIOCGWINSZ)
	if err != nil {
		return sandbox.WindowSize{}
	}
	return sandbox.WindowSize{Rows: ws.Row, Cols: ws.Col}
}

// watchResize sends tty's size to resize on each SIGWINCH (the
// supervisor leads the terminal's session: the kernel sends it one when
// the master is resized), until stop.
func watchResize(tty *os.File, resize chan<- sandbox.WindowSize) (stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGWINCH)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case <-done:
				return
			case <-c:
			}
			if sz := windowSize(tty); sz.Rows > 0 && sz.Cols > 0 {
				select {
				case resize <- sz:
				default:
				}
			}
		}
	}()
	return func() { signal.Stop(c); close(done) }
}
