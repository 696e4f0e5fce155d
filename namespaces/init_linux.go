package namespaces

import (
	"errors"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/internal/memtrim"
	"github.com/tent-sandbox/tent/seccomp"
)

// IdleTrimAfter is how long a long-lived sandbox's init waits without a
// request before trimming its memory (internal/memtrim): an idle init
// then holds about 1 MiB of its own instead of ~12 MiB of mapped binary
// pages, and its next exec faults back the few hundred pages it needs.
const IdleTrimAfter = 3 * time.Second

// IsInit reports whether this process was started as a sandbox init.
func IsInit() bool { return len(os.Args) > 0 && os.Args[0] == InitArg0 }

// MaybeRunInit runs the sandbox init and exits when this process is one;
// otherwise it returns at once. Call it (through sandbox.Init) first thing
// in main.
func MaybeRunInit() {
	if len(os.Args) > 0 && os.Args[0] == ExecArg0 {
		os.Exit(runTrampoline())
	}
	if len(os.Args) > 0 && os.Args[0] == fs.FileHelperArg0 {
		os.Exit(fs.RunFileHelper(os.Args[1:], os.Stdin, os.Stdout, os.Stderr))
	}
	if !IsInit() {
		return
	}
	os.Exit(runInit())
}

// runInit is the init's main. It returns the process exit code.
func runInit() int {
	// Die with the host side; refuse to be ptraced or have /proc/1/mem or
	// /proc/1/exe opened by the sandbox's processes.
	_ = unix.Prctl(unix.PR_SET_PDEATHSIG, uintptr(unix.SIGKILL), 0, 0, 0)
	_ = unix.Prctl(unix.PR_SET_DUMPABLE, 0, 0, 0, 0)
	// Whatever the host leaked to us (descriptors without close-on-exec)
	// must never reach the command: only fds 0-2 are passed on.
	if err := unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC); err != nil {
		return ExitProtocol
	}
	f := os.NewFile(3, "tent-control")
	fc, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return ExitProtocol
	}
	conn := fc.(*net.UnixConn)
	defer conn.Close()
	// Signals for the init itself come only through the socket: catch and
	// drop the others. (Not signal.Ignore: SIG_IGN would be inherited by
	// the command across execve; caught signals are reset to default.)
	drop := make(chan os.Signal, 8)
	signal.Notify(drop, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGTSTP, unix.SIGTTIN, unix.SIGTTOU, unix.SIGUSR1, unix.SIGUSR2)
	go func() {
		for range drop {
		}
	}()
	chld := make(chan os.Signal, 16)
	signal.Notify(chld, unix.SIGCHLD)

	if err := send(conn, message{Type: msgHello}, nil); err != nil {
		return ExitProtocol
	}
	m, fds, err := recv(conn)
	if err != nil || m.Type != msgConfig || m.Config == nil {
		return ExitProtocol
	}
	cfg := m.Config
	fail := func(stage string, err error) int {
		var errno syscall.Errno
		errors.As(err, &errno)
		_ = send(conn, message{Type: msgError, Stage: stage, Error: err.Error(), Errno: int(errno)}, nil)
		return ExitSetupFailed
	}

	hostView := -1
	if cfg.HostView {
		if hostView, err = fs.SaveHostView(); err != nil {
			return fail("setup", err)
		}
	}
	if err := setup(cfg, fds); err != nil {
		return fail("setup", err)
	}
	var listeners []int
	if cfg.ProxyListeners {
		if listeners, err = proxyListeners(); err != nil {
			return fail("proxy", err)
		}
	}
	var prog seccomp.Program
	if len(cfg.Seccomp) > 0 {
		if prog, err = seccomp.UnmarshalProgram(cfg.Seccomp); err != nil {
			return fail("seccomp", err)
		}
	}
	sp := newSpawner(cfg, prog)
	// execs maps the pids of running commands to their exec ids; the
	// one-shot command has the empty id and its exit ends the init.
	execs := map[int]string{}
	oneShot := cfg.Exec.Path != ""
	ready := message{Type: msgReady}
	if oneShot {
		pid, stage, err := sp.spawn(cfg.Exec, [3]int{0, 1, 2}, false)
		if err != nil {
			return fail(stage, err)
		}
		execs[pid] = ""
		ready = message{Type: msgStarted, Pid: pid}
	}
	if err := send(conn, ready, listeners); err != nil {
		return ExitProtocol
	}
	closeAll(listeners) // the host holds them now
	pidOf := func(id string) int {
		for pid, e := range execs {
			if e == id {
				return pid
			}
		}
		return 0
	}

	// Control messages from the host, until EOF.
	type control struct {
		m   message
		fds []int
	}
	ctl := make(chan control)
	go func() {
		defer close(ctl)
		for {
			m, fds, err := recv(conn)
			if err != nil {
				return
			}
			ctl <- control{m, fds}
		}
	}()
	// An init that has had nothing to do for IdleTrimAfter gives back its
	// resident copies of tent's code and its free heap (see memtrim).
	idle := time.NewTimer(IdleTrimAfter)
	for {
		select {
		case <-idle.C:
			_, _ = memtrim.Trim()
		case c, ok := <-ctl:
			if !ok {
				return ExitProtocol // the host is gone: take everything down
			}
			idle.Reset(IdleTrimAfter)
			m := c.m
			switch m.Type {
			case msgExec:
				if len(c.fds) != 3 || m.Exec == nil || m.ID == "" || pidOf(m.ID) != 0 {
					closeAll(c.fds)
					_ = send(conn, message{Type: msgError, ID: m.ID, Stage: "protocol", Error: "an exec needs an unused id, a command and 3 descriptors"}, nil)
					continue
				}
				pid, stage, err := sp.spawn(*m.Exec, [3]int{c.fds[0], c.fds[1], c.fds[2]}, true)
				closeAll(c.fds)
				if err != nil {
					var errno syscall.Errno
					errors.As(err, &errno)
					_ = send(conn, message{Type: msgError, ID: m.ID, Stage: stage, Error: err.Error(), Errno: int(errno)}, nil)
					continue
				}
				execs[pid] = m.ID
				_ = send(conn, message{Type: msgStarted, ID: m.ID, Pid: pid}, nil)
			case msgAttach:
				var err error
				if m.Attach == nil || m.ID == "" {
					err = errors.New("an attach needs an id and a step")
				} else {
					err = fs.AttachStep(hostView, m.Attach.Step, c.fds)
				}
				closeAll(c.fds)
				if err != nil {
					var errno syscall.Errno
					errors.As(err, &errno)
					_ = send(conn, message{Type: msgError, ID: m.ID, Stage: "attach", Error: err.Error(), Errno: int(errno)}, nil)
					continue
				}
				if len(m.Attach.Rules) > 0 {
					cfg.LandlockRules = append(cfg.LandlockRules, m.Attach.Rules...)
					sp.rulesChanged()
				}
				_ = send(conn, message{Type: msgDone, ID: m.ID}, nil)
			case msgSignal:
				closeAll(c.fds)
				if pid := pidOf(m.ID); pid != 0 {
					_ = unix.Kill(pid, syscall.Signal(m.Signal))
				}
			case msgKill:
				closeAll(c.fds)
				// The exec's session: itself and whatever stayed in its
				// process group. (Descendants that started their own
				// session are only reached by terminating the sandbox.)
				if pid := pidOf(m.ID); pid != 0 {
					_ = unix.Kill(-pid, unix.SIGKILL)
					_ = unix.Kill(pid, unix.SIGKILL)
				}
			default:
				closeAll(c.fds)
			}
		case <-chld:
			// PID 1 reaps every orphan; an exec's own status is reported.
			for {
				var ws unix.WaitStatus
				wpid, err := unix.Wait4(-1, &ws, unix.WNOHANG, nil)
				if err != nil || wpid <= 0 {
					break
				}
				id, ok := execs[wpid]
				if !ok {
					continue
				}
				delete(execs, wpid)
				_ = send(conn, message{Type: msgExit, ID: id, Status: uint32(ws)}, nil)
				if oneShot && id == "" {
					return 0
				}
			}
		}
	}
}

// setup builds the sandbox around the init: hostname, loopback, the root
// filesystem, resource limits.
func setup(cfg *Config, fds []int) error {
	defer closeAll(fds)
	if cfg.Hostname != "" {
		if err := unix.Sethostname([]byte(cfg.Hostname)); err != nil {
			return fmt.Errorf("setting the hostname: %w", os.NewSyscallError("sethostname", err))
		}
	}
	if cfg.Loopback {
		if err := loopbackUp(); err != nil {
			return err
		}
	}
	if cfg.Plan == nil {
		return errors.New("no mount plan")
	}
	if err := cfg.Plan.Apply(fds); err != nil {
		return fmt.Errorf("building the root filesystem: %w", err)
	}
	return nil
}

// proxyListeners listens on 127.0.0.1's proxy ports, in this (the
// sandbox's) network namespace.
func proxyListeners() ([]int, error) {
	var fds []int
	for _, port := range []int{ProxyHTTPPort, ProxySOCKSPort} {
		fd, err := unix.Socket(unix.AF_INET, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
		if err != nil {
			closeAll(fds)
			return nil, os.NewSyscallError("socket", err)
		}
		fds = append(fds, fd)
		if err := unix.Bind(fd, &unix.SockaddrInet4{Port: port, Addr: [4]byte{127, 0, 0, 1}}); err != nil {
			closeAll(fds)
			return nil, fmt.Errorf("proxy port %d: %w", port, os.NewSyscallError("bind", err))
		}
		if err := unix.Listen(fd, 1024); err != nil {
			closeAll(fds)
			return nil, os.NewSyscallError("listen", err)
		}
	}
	return fds, nil
}

// loopbackUp brings up lo in the new network namespace.
func loopbackUp() error {
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("socket", err))
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		return err
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("ioctl(SIOCGIFFLAGS)", err))
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		return fmt.Errorf("loopback: %w", os.NewSyscallError("ioctl(SIOCSIFFLAGS)", err))
	}
	return nil
}
