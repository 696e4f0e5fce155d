package namespaces

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"runtime"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
)

// Options are the host-side settings of an init process.
type Options struct {
	// ShareNet keeps the host's network namespace.
	ShareNet bool
	// ShareIPC keeps this thread's IPC namespace (a pod's, which the
	// caller joined) instead of a new one.
	ShareIPC bool
	// UIDMap and GIDMap map ids inside to ids outside: exactly one (the
	// sandbox's user, ContainerID) or, for a root caller's id range
	// (Privileged only), Size ids from ContainerID 0, the init then
	// running as UID and GID.
	UIDMap, GIDMap syscall.SysProcIDMap
	// UID and GID are the init's ids inside when the maps are a range
	// (Size > 1); with one id, they are its ContainerID.
	UID, GID uint32
	// Privileged is set when the caller is root on the host: supplementary
	// groups are cleared and the init switches to the mapped ids.
	Privileged bool
	// CgroupFD, when >= 0, is a cgroup v2 directory the init is cloned
	// into (clone3 CLONE_INTO_CGROUP, Linux 5.7; where the shared-memory
	// clone's clone3 fails, its child joins it before anything else), so
	// none of its code runs outside it.
	CgroupFD int
	// CgroupTasks, on cgroup v1, are the sandbox cgroup's tasks files
	// (cgroups.Cgroup.OpenSelfJoin, close-on-exec; at most eight): the
	// shared-memory clone writes "0" to each before it execs, so that the
	// init joins every hierarchy without the kernel's global lock that
	// moving it from the host takes (an RCU grace period per start). The
	// caller keeps and closes them. [Init.JoinedCgroup] reports whether
	// they were used; when not (os/exec's path), the caller moves the
	// init itself before sending its Config.
	CgroupTasks []int
	// PIDNamespace, when not nil, is a pid namespace (a pod's) the init
	// is cloned into instead of a new one of its own (Kubernetes'
	// shareProcessNamespace): the clone runs on a thread that joined it
	// for its children (setns), which no other code then uses. The init is
	// then not PID 1 but a child subreaper, and cannot mount that
	// namespace's procfs from its own user namespace: a helper cloned
	// into it beside (the tent binary as "tent-procfs") makes the mount,
	// which the init gets as [Init.TakeProc]'s descriptor. It must be a
	// namespace another sandbox made ([CheckPIDNamespace]). Needs root
	// (CAP_SYS_ADMIN here).
	PIDNamespace *os.File
	// ParentReaps makes the init a child of this process's parent
	// (CLONE_PARENT) instead of this process's: for a parent that learns
	// a container's end by reaping one pid (containerd's runc shim,
	// through tent-runc, a subreaper once the caller has exited), the
	// sandbox's init is that pid, in the sandbox's namespaces and cgroup.
	// It then does not die with this thread (no parent-death signal): it
	// exits when its control socket closes, or with the status
	// [Init.Quit] gives it. This process watches it through a pidfd and
	// never learns its status; the stdio must be nil or *os.File.
	ParentReaps bool
	// Stdin, Stdout and Stderr become the command's fds 0, 1 and 2.
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	Logger         *slog.Logger
}

// Init is a running sandbox init as seen from the host.
type Init struct {
	cmd    *exec.Cmd // os/exec's path; nil when cloned by cloneShared or adopted
	proc   *child    // the init on the other paths
	pid    int
	conn   *os.File // the control socket (ctlmsg.NewConn)
	log    *slog.Logger
	sendMu sync.Mutex
	tty    *os.File // the one-shot command's terminal master (Exec.TTY)
	// joined is set when the init joined Options.CgroupTasks itself.
	joined bool
	// procfs is the procfs of Options.PIDNamespace (a detached mount)
	// when hasProcfs: see TakeProc.
	procfs    int
	hasProcfs bool
	// phases are the init's, from its "started" or "ready" message.
	phases Phases

	// Long-lived sandboxes (see Serve): pending execs by id.
	mu      sync.Mutex
	waits   map[string]*execWait
	deadErr error // set when the control socket failed
}

// Start clones the init into new namespaces. It does not wait for it to
// set anything up; send a Config with [Init.Run].
func Start(ctx context.Context, o Options) (*Init, error) {
	if o.PIDNamespace != nil {
		return startInPID(ctx, o)
	}
	return start(ctx, o, false)
}

// TakeProc returns the procfs mount of Options.PIDNamespace for the
// init's plan (fs.Step.FD of its /proc), once; -1 without one. The
// caller closes it.
func (i *Init) TakeProc() int {
	if !i.hasProcfs {
		return -1
	}
	i.hasProcfs = false
	return i.procfs
}

// CheckPIDNamespace checks that f is a pid namespace a sandbox may join
// (Options.PIDNamespace): one not owned by this process's user namespace
// (the host's own, whose processes the sandbox would see, or one no
// sandbox made), such as another sandbox's.
func CheckPIDNamespace(f *os.File) error {
	if t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWPID {
		return fmt.Errorf("%s is not a pid namespace (%v)", f.Name(), err)
	}
	if mine, err := OwnedByCaller(f); err != nil || mine {
		return fmt.Errorf("the pid namespace %s belongs to this process's user namespace (the host's, or one no sandbox made): only another sandbox's is joined (%v)", f.Name(), err)
	}
	return nil
}

// OwnedByCaller reports whether the namespace f is owned by this
// process's user namespace (for a root caller, the host's): a namespace a
// sandbox or container made is owned by its own.
func OwnedByCaller(f *os.File) (bool, error) {
	owner, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_USERNS)
	if err != nil {
		return false, os.NewSyscallError("NS_GET_USERNS", err)
	}
	defer unix.Close(owner)
	var theirs, ours unix.Stat_t
	if err := unix.Fstat(owner, &theirs); err != nil {
		return false, err
	}
	if err := unix.Stat("/proc/self/ns/user", &ours); err != nil {
		return false, err
	}
	return theirs.Dev == ours.Dev && theirs.Ino == ours.Ino, nil
}

// startInPID is Start with Options.PIDNamespace: from a thread that
// joined the namespace for its children (onThreadIn), it clones the
// procfs helper and then the init into it. The thread must live on
// afterwards: it is the init's parent, and the init's parent-death signal
// follows that thread, not this process.
func startInPID(ctx context.Context, o Options) (*Init, error) {
	if err := CheckPIDNamespace(o.PIDNamespace); err != nil {
		return nil, err
	}
	var i *Init
	err := onThreadIn(o.PIDNamespace, unix.CLONE_NEWPID, func() error {
		proc, err := procfsFromHelper(ctx)
		if err != nil {
			return err
		}
		if i, err = start(ctx, o, true); err != nil {
			unix.Close(proc)
			return err
		}
		i.procfs, i.hasProcfs = proc, true
		return nil
	}, func() {
		// The thread cannot live on: its end would kill the init.
		_ = i.Kill()
		_ = i.Close()
		i = nil
	})
	return i, err
}

// onThreadIn runs fn on a locked thread that joined the namespace ns (of
// type nstype: for a pid namespace, its children's), then takes the
// thread's own namespace back and gives the thread back to the runtime.
// Should that fail after fn succeeded, undo runs, the error is returned
// and the thread, still locked, ends with its goroutine. While it is in
// another namespace the runtime makes no thread from it (it makes those
// from its template thread for a locked one).
func onThreadIn(ns *os.File, nstype int, fn func() error, undo func()) error {
	name := map[int]string{unix.CLONE_NEWPID: "pid", unix.CLONE_NEWNET: "net"}[nstype]
	own, err := os.Open("/proc/thread-self/ns/" + name)
	if err != nil {
		return err
	}
	defer own.Close()
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		if err := unix.Setns(int(ns.Fd()), nstype); err != nil {
			done <- fmt.Errorf("joining the %s namespace %s: %w", name, ns.Name(), os.NewSyscallError("setns", err))
			return // locked: the thread ends here
		}
		err := fn()
		if rerr := unix.Setns(int(own.Fd()), nstype); rerr != nil {
			if err == nil {
				undo()
			}
			done <- fmt.Errorf("taking this thread's own %s namespace back: %w", name, os.NewSyscallError("setns", rerr))
			return // locked: the thread ends here
		}
		runtime.UnlockOSThread()
		done <- err
	}()
	return <-done
}

func start(ctx context.Context, o Options, sharedPID bool) (*Init, error) {
	if IsInit() {
		return nil, fmt.Errorf("refusing to start a sandbox from inside a sandbox init: %w", ErrInitMissing)
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	pair, err := unix.Socketpair(unix.AF_UNIX, unix.SOCK_SEQPACKET|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return nil, os.NewSyscallError("socketpair", err)
	}
	initEnd := os.NewFile(uintptr(pair[1]), "tent-control-init")
	defer initEnd.Close()
	conn, err := ctlmsg.NewConn(pair[0], "tent-control")
	if err != nil {
		unix.Close(pair[0])
		return nil, fmt.Errorf("control socket: %w", err)
	}

	flags := uintptr(unix.CLONE_NEWUSER | unix.CLONE_NEWNS | unix.CLONE_NEWUTS)
	if !sharedPID {
		flags |= unix.CLONE_NEWPID
	}
	if !o.ShareNet {
		flags |= unix.CLONE_NEWNET
	}
	if !o.ShareIPC {
		flags |= unix.CLONE_NEWIPC
	}
	argv := []string{InitArg0}
	if o.ParentReaps {
		flags |= unix.CLONE_PARENT
		argv = append(argv, initParentReaps)
	}
	sys := &syscall.SysProcAttr{
		Cloneflags:  flags,
		Setsid:      true,
		UidMappings: []syscall.SysProcIDMap{o.UIDMap},
		GidMappings: []syscall.SysProcIDMap{o.GIDMap},
		AmbientCaps: allCaps(),
	}
	if o.Privileged {
		sys.GidMappingsEnableSetgroups = true
		uid, gid := o.initIDs()
		sys.Credential = &syscall.Credential{Uid: uid, Gid: gid, Groups: []uint32{}}
	}
	if o.CgroupFD >= 0 {
		sys.UseCgroupFD = true
		sys.CgroupFD = o.CgroupFD
	}
	log := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	// The init runs with one P (GOMAXPROCS=1, as on os/exec's path): its
	// work is a sequence of system calls, and a second P only gave its
	// runtime's start another spinning thread to compete with the host's
	// for the CPUs (about 1 ms of `tent run` on a 2-CPU host). It starts
	// threads on demand, after its command has started too, so its
	// threads must not count against the sandbox's pids limit, which its
	// commands may fill: that limit is the commands' alone
	// (Config.CommandsCgroup).
	if fastCloneAvailable {
		if fds, ok := stdioFiles(o.Stdin, o.Stdout, o.Stderr); ok {
			initUID, initGID := o.initIDs()
			defer closeAll(fds.opened)
			pid, intoCgroup, err := cloneShared("/proc/self/exe", argv, []string{"GOMAXPROCS=1"},
				[4]int{fds.fds[0], fds.fds[1], fds.fds[2], int(initEnd.Fd())}, flags, o.CgroupFD, o.CgroupTasks,
				o.Privileged, initUID, initGID,
				func(pid int) error { return writeIDMaps(pid, o.UIDMap, o.GIDMap, o.Privileged) })
			if err != nil {
				conn.Close()
				return nil, err
			}
			proc, err := newChild(pid, o.ParentReaps)
			if err != nil {
				conn.Close()
				return nil, err
			}
			log.Debug("sandbox init started", "pid", pid, "cloneflags", fmt.Sprintf("%#x", flags), "shared-memory clone", true, "cloned into its cgroup", intoCgroup)
			return &Init{proc: proc, pid: pid, conn: conn, log: log, joined: len(o.CgroupTasks) > 0}, nil
		}
	}
	if o.ParentReaps {
		if _, ok := stdioFiles(o.Stdin, o.Stdout, o.Stderr); !ok {
			conn.Close()
			return nil, errors.New("starting the sandbox init: an init its parent reaps needs files (or nil) as its stdio")
		}
	}
	cmd := &exec.Cmd{
		Path:        "/proc/self/exe",
		Args:        argv,
		Env:         []string{"GOMAXPROCS=1"},
		Stdin:       o.Stdin,
		Stdout:      o.Stdout,
		Stderr:      o.Stderr,
		ExtraFiles:  []*os.File{initEnd},
		SysProcAttr: sys,
	}
	if err := cmd.Start(); err != nil {
		conn.Close()
		return nil, fmt.Errorf("starting the sandbox init: %w", err)
	}
	log.Debug("sandbox init started", "pid", cmd.Process.Pid, "cloneflags", fmt.Sprintf("%#x", flags))
	if o.ParentReaps {
		// Not this process's child: os/exec cannot wait for it (its
		// stdio are files, so no copy goroutine waits on it either).
		pid := cmd.Process.Pid
		_ = cmd.Process.Release()
		proc, err := newChild(pid, true)
		if err != nil {
			conn.Close()
			return nil, err
		}
		return &Init{proc: proc, pid: pid, conn: conn, log: log}, nil
	}
	return &Init{cmd: cmd, pid: cmd.Process.Pid, conn: conn, log: log}, nil
}

// openedStdio are the init's fds 0-2 for cloneShared.
type openedStdio struct {
	fds    [3]int
	opened []int // descriptors opened here (/dev/null), closed after the clone
}

// stdioFiles resolves the init's stdio when each is nil (/dev/null) or
// an *os.File; ok is false otherwise (readers and writers that need copy
// goroutines take os/exec's path).
func stdioFiles(in io.Reader, out, errw io.Writer) (openedStdio, bool) {
	var s openedStdio
	for i, x := range []any{in, out, errw} {
		switch v := x.(type) {
		case nil:
			fd, err := unix.Open("/dev/null", unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				closeAll(s.opened)
				return s, false
			}
			s.opened = append(s.opened, fd)
			s.fds[i] = fd
		case *os.File:
			if v == nil {
				closeAll(s.opened)
				return s, false
			}
			s.fds[i] = int(v.Fd())
		default:
			closeAll(s.opened)
			return s, false
		}
	}
	return s, true
}

// initIDs are the ids the init runs as inside: UID and GID with a range
// of ids, else the one mapped id.
func (o *Options) initIDs() (uid, gid uint32) {
	if o.UIDMap.Size > 1 || o.GIDMap.Size > 1 {
		return o.UID, o.GID
	}
	return uint32(o.UIDMap.ContainerID), uint32(o.GIDMap.ContainerID)
}

// writeIDMaps writes pid's one-id uid and gid maps, as os/exec does for
// SysProcAttr.UidMappings: setgroups is denied first for an unprivileged
// caller (the kernel requires it), kept for root.
func writeIDMaps(pid int, uid, gid syscall.SysProcIDMap, privileged bool) error {
	write := func(name, data string) error {
		return os.WriteFile(fmt.Sprintf("/proc/%d/%s", pid, name), []byte(data), 0)
	}
	if err := write("uid_map", fmt.Sprintf("%d %d %d\n", uid.ContainerID, uid.HostID, uid.Size)); err != nil {
		return fmt.Errorf("writing the init's uid map: %w", err)
	}
	if !privileged {
		if err := write("setgroups", "deny"); err != nil {
			return fmt.Errorf("writing the init's setgroups: %w", err)
		}
	}
	if err := write("gid_map", fmt.Sprintf("%d %d %d\n", gid.ContainerID, gid.HostID, gid.Size)); err != nil {
		return fmt.Errorf("writing the init's gid map: %w", err)
	}
	return nil
}

// helloTimeout bounds the wait for a fresh init's first message.
const helloTimeout = 10 * time.Second

// JoinedCgroup reports whether the init joined the cgroup v1 hierarchies
// of Options.CgroupTasks itself, before it exec'd.
func (i *Init) JoinedCgroup() bool { return i.joined }

// Pid is the init's pid on the host.
func (i *Init) Pid() int { return i.pid }

// StartError is the init's report that setup or exec failed.
type StartError struct {
	Stage string // "setup", "landlock", "seccomp", "exec", ...
	Msg   string
	Errno syscall.Errno
}

func (e *StartError) Error() string { return e.Stage + ": " + e.Msg }

// Unwrap exposes the errno, so errors.Is(err, syscall.ENOENT) works.
func (e *StartError) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// Run sends cfg with fds attached (the host keeps ownership of fds) and
// waits until the command has started. It returns the command's pid in
// the sandbox's pid namespace and, when cfg.ProxyListeners is set, the
// two listening sockets (HTTP, SOCKS5; close-on-exec, owned by the caller)
// followed, with cfg.Transparent, by the stub DNS's UDP socket and a
// listener per port of cfg.CatchPorts.
func (i *Init) Run(cfg *Config, fds []int) (int, []int, error) {
	if err := send(i.conn, message{Type: msgConfig, Config: cfg}, fds); err != nil {
		return 0, nil, err
	}
	// A program that forgot sandbox.Init runs its own main instead of the
	// init: never wait for it longer than helloTimeout.
	_ = i.conn.SetReadDeadline(time.Now().Add(helloTimeout))
	m, extra, err := recv(i.conn)
	closeAll(extra)
	if err != nil || m.Type != msgHello {
		_ = i.Kill()
		if err == nil {
			err = fmt.Errorf("unexpected %q message", m.Type)
		}
		return 0, nil, fmt.Errorf("%w (%v)", ErrInitMissing, err)
	}
	_ = i.conn.SetReadDeadline(time.Time{})
	m, extra, err = recv(i.conn)
	if err != nil {
		return 0, nil, i.explain(err)
	}
	switch m.Type {
	case msgStarted, msgReady:
		i.phases = phasesOf(m.Stamps)
		if m.TTY && len(extra) > 0 {
			i.tty = os.NewFile(uintptr(extra[len(extra)-1]), "tent-tty-master")
			extra = extra[:len(extra)-1]
		}
		if want := proxySockets(cfg); len(extra) != want {
			closeAll(extra)
			return 0, nil, fmt.Errorf("sandbox init: %d proxy sockets, want %d", len(extra), want)
		}
		if cfg.Exec.TTY != nil && i.tty == nil {
			closeAll(extra)
			return 0, nil, errors.New("sandbox init: no terminal for the command")
		}
		return m.Pid, extra, nil
	case msgError:
		closeAll(extra)
		return 0, nil, &StartError{Stage: m.Stage, Msg: m.Error, Errno: syscall.Errno(m.Errno)}
	}
	closeAll(extra)
	return 0, nil, fmt.Errorf("sandbox init: unexpected %q message", m.Type)
}

// proxySockets is how many sockets the init of cfg hands the host.
func proxySockets(cfg *Config) int {
	switch {
	case !cfg.ProxyListeners:
		return 0
	case cfg.Transparent:
		return 3 + len(cfg.CatchPorts)
	}
	return 2
}

// Phases are the moments the init reached each step of its start, once
// [Init.Run] has returned.
func (i *Init) Phases() Phases { return i.phases }

// Terminal is the master of the one-shot command's terminal (Exec.TTY),
// owned by the caller once Run has returned; nil without one.
func (i *Init) Terminal() *os.File { return i.tty }

// explain turns a dead control socket into the init's own story.
func (i *Init) explain(err error) error {
	state, werr := i.wait()
	if werr == nil && state.Exited() && state.ExitStatus() == 0 {
		return fmt.Errorf("sandbox init exited before answering (%w)", ErrInitMissing)
	}
	return fmt.Errorf("sandbox init died before answering (%s): %w", describeWait(state, werr), err)
}

// Signal forwards sig to the one-shot command's foreground process group:
// its terminal's (Exec.TTY), else the group the command leads.
func (i *Init) Signal(sig syscall.Signal) error {
	return i.send(message{Type: msgSignal, Signal: int(sig)}, nil)
}

func (i *Init) send(m message, fds []int) error {
	i.sendMu.Lock()
	defer i.sendMu.Unlock()
	return send(i.conn, m, fds)
}

// WaitExit waits for the command's exit report. If the init dies without
// one (killed, out of memory), it returns an error and the init's state.
func (i *Init) WaitExit() (syscall.WaitStatus, error) {
	for {
		m, extra, err := recv(i.conn)
		closeAll(extra)
		if err != nil {
			state, werr := i.wait()
			return 0, fmt.Errorf("sandbox init ended without an exit report (%s): %w", describeWait(state, werr), err)
		}
		if m.Type == msgExit {
			return syscall.WaitStatus(m.Status), nil
		}
		i.log.Debug("ignoring control message", "type", m.Type)
	}
}

// Quit asks the init to exit with code, as its status (the init of
// [Options.ParentReaps], whose parent reaps it, exits with the status of
// the container's main process), and waits for it to exit: grace at
// most, after which it is killed. The kernel then kills every other
// process of its pid namespace before its parent sees it exit.
func (i *Init) Quit(code int, grace time.Duration) error {
	if code < 0 || code > 255 {
		return fmt.Errorf("an init's exit status is 0-255, not %d", code)
	}
	if err := i.send(message{Type: msgQuit, Status: uint32(code)}, nil); err != nil {
		return i.Kill()
	}
	exited := make(chan struct{})
	go func() {
		_, _ = i.wait()
		close(exited)
	}()
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-exited:
		return nil
	case <-t.C:
		i.log.Warn("the sandbox init did not quit: killing it", "pid", i.pid, "grace", grace)
		return i.Kill()
	}
}

// Kill kills the init with SIGKILL; the kernel then kills every process
// of its pid namespace.
func (i *Init) Kill() error {
	if i.proc != nil {
		return i.proc.kill()
	}
	err := i.cmd.Process.Kill()
	if errors.Is(err, os.ErrProcessDone) {
		return nil
	}
	return err
}

// Close kills the init if it still runs, reaps it, waits for its stdio
// copies and closes the control socket.
func (i *Init) Close() error {
	if fd := i.TakeProc(); fd >= 0 {
		unix.Close(fd)
	}
	i.conn.Close() // EOF makes a live init exit
	_, err := i.wait()
	return err
}

func (i *Init) wait() (syscall.WaitStatus, error) {
	if i.proc != nil {
		return i.proc.wait()
	}
	if i.cmd.ProcessState == nil {
		err := i.cmd.Wait()
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			err = nil
		}
		if i.cmd.ProcessState == nil {
			return 0, err
		}
		return i.cmd.ProcessState.Sys().(syscall.WaitStatus), err
	}
	return i.cmd.ProcessState.Sys().(syscall.WaitStatus), nil
}

// describeWait is the init's end for an error message.
func describeWait(ws syscall.WaitStatus, err error) string {
	if err != nil {
		return err.Error()
	}
	return describeStatus(ws)
}

// allCaps lists every capability the running kernel knows, for the init's
// ambient set: an init whose uid inside is not 0 keeps them across execve.
func allCaps() []uintptr {
	last := lastCap()
	caps := make([]uintptr, 0, last+1)
	for c := 0; c <= last; c++ {
		caps = append(caps, uintptr(c))
	}
	return caps
}
