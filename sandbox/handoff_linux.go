package sandbox

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strconv"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/sandbox/internal/handoff"
)

// supervisedState is what an idle supervisor leaves, in a memfd, for the
// process that resumes it: everything its *Sandbox held, and the
// descriptors (numbers valid in the new image) of the init's control
// socket, the supervisor's listening socket and the proxy's listeners.
type supervisedState struct {
	Store      string            `json:"store"`
	ID         string            `json:"id"`
	Spec       Spec              `json:"spec"`
	Config     namespaces.Config `json:"config"`
	Privileged bool              `json:"privileged"`
	UID        uint32            `json:"uid"`
	GID        uint32            `json:"gid"`
	HostUID    int               `json:"host_uid"` // what UID and GID are on the host
	HostGID    int               `json:"host_gid"`
	CowRoot    string            `json:"cow_root,omitempty"`
	Layers     []CowLayer        `json:"layers,omitempty"`
	Report     Report            `json:"report"`
	Cgroup     *cgroups.State    `json:"cgroup,omitempty"`
	InitPID    int               `json:"init_pid"`
	Control    int               `json:"control"`
	Listener   int               `json:"listener"`
	Proxy      []int             `json:"proxy,omitempty"`
	// Published are the published ports and PublishedFDs their host
	// listening sockets, in the same order.
	Published    []PortMapping `json:"published,omitempty"`
	PublishedFDs []int         `json:"published_fds,omitempty"`
	// FakeNames are the stub DNS's answers, which programs inside may
	// have cached: the next proxy keeps their meaning.
	FakeNames []netpolicy.FakeName `json:"fake_names,omitempty"`
	Start     time.Time            `json:"start"`
	Deadline  time.Time            `json:"deadline"`
	Suspended bool                 `json:"suspended,omitempty"`
	NextExec  int                  `json:"next_exec"`
}

// quiet reports whether s has nothing in flight that a hand-off would
// cut: no exec or attach awaiting the init, no proxied connection open.
func (s *Sandbox) quiet() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.run
	return !s.done && r.direct == nil && r.init.Idle() && (r.proxy == nil || r.proxy.Active() == 0) &&
		(r.pub == nil || !r.pub.busy())
}

// captureState returns s's state and the descriptors (not close-on-exec)
// it names; the caller closes them if the exec does not happen.
func (s *Sandbox) captureState() (*supervisedState, []int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, p := s.run, s.run.plan
	r.catchMu.Lock() // p.cfg.CatchPorts and r.proxyFDs
	defer r.catchMu.Unlock()
	st := &supervisedState{
		Spec: s.spec, Config: p.cfg, Privileged: p.privileged, UID: p.uid, GID: p.gid,
		HostUID: p.opts.UIDMap.HostID, HostGID: p.opts.GIDMap.HostID,
		CowRoot: p.cowRoot, Layers: p.layers, Report: p.report,
		InitPID: r.init.Pid(), Start: r.start, Deadline: s.deadline,
		Suspended: s.suspended, NextExec: s.nextExec,
	}
	if r.cg != nil {
		cs := r.cg.State()
		st.Cgroup = &cs
	}
	ctl, err := r.init.DupControl()
	if err != nil {
		return nil, nil, err
	}
	fds := []int{ctl}
	st.Control = ctl
	for _, fd := range r.proxyFDs {
		d, err := unix.Dup(fd)
		if err != nil {
			closeFDs(fds)
			return nil, nil, os.NewSyscallError("dup", err)
		}
		fds = append(fds, d)
		st.Proxy = append(st.Proxy, d)
	}
	if r.proxy != nil {
		st.FakeNames = r.proxy.FakeNames()
	}
	if r.pub != nil {
		ms, pfds := r.pub.fds()
		for i, fd := range pfds {
			d, err := unix.Dup(fd)
			if err != nil {
				closeFDs(fds)
				return nil, nil, os.NewSyscallError("dup", err)
			}
			fds = append(fds, d)
			st.Published = append(st.Published, ms[i])
			st.PublishedFDs = append(st.PublishedFDs, d)
		}
	}
	return st, fds, nil
}

func init() {
	handoff.Quiet = func(sb any) bool { return sb.(*Sandbox).quiet() }
	handoff.HandOff = func(sb any, store, id string, listener int, argv []string) error {
		return sb.(*Sandbox).handOff(store, id, listener, argv)
	}
	handoff.Adopt = func(stateFD string, opts any) (any, handoff.Resumed, error) {
		return adopt(stateFD, opts.(ProvisionOptions))
	}
	handoff.Ended = func(sb any) string { return sb.(*Sandbox).endReason() }
	handoff.RemoveSnapshotTemps = removeSnapshotTemps
}

// endReason says why s, which ended on its own, ended: its
// Limits.Timeout ran out, or its init ended (see initEndReason).
func (s *Sandbox) endReason() string {
	if !s.deadline.IsZero() && !time.Now().Before(s.deadline) {
		return fmt.Sprintf("timed out after %s", s.spec.Limits.Timeout)
	}
	code, status, ok := waitNoReap(s.run.init.Pid())
	return initEndReason(code, status, ok, s.run.oomKills())
}

// initEndReason says how a sandbox's init ended, from its wait status
// (code CLD_EXITED with its exit status, or CLD_KILLED or CLD_DUMPED
// with the signal; ok false when unknown) and the OOM kills its cgroup
// counted: a kill with an OOM kill counted is the OOM killer's (with
// memory.oom.group it ends the whole sandbox, its init first among
// them).
func initEndReason(code, status int32, ok bool, oomKills int64) string {
	switch {
	case oomKills > 0 && (!ok || code != cldExited):
		return "out of memory: the OOM killer ended its init"
	case !ok:
		return "its init ended"
	case code == cldExited:
		return fmt.Sprintf("its init exited with status %d", status)
	case code == cldKilled || code == cldDumped:
		return fmt.Sprintf("its init was killed (%s)", unix.SignalName(syscall.Signal(status)))
	}
	return "its init ended"
}

// si_code values of SIGCHLD (siginfo.h): how a child ended.
const (
	cldExited = 1
	cldKilled = 2
	cldDumped = 3
)

// waitNoReap reads how the child pid ended without reaping it (waitid
// with WNOWAIT: Terminate reaps it): the siginfo's si_code and
// si_status; ok is false while it runs or when it is not a child.
func waitNoReap(pid int) (code, status int32, ok bool) {
	if pid <= 0 {
		return 0, 0, false
	}
	var info unix.Siginfo
	err := unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
	for err == unix.EINTR {
		err = unix.Waitid(unix.P_PID, pid, &info, unix.WEXITED|unix.WNOWAIT|unix.WNOHANG, nil)
	}
	if err != nil || info.Signo != int32(unix.SIGCHLD) {
		return 0, 0, false
	}
	// The SIGCHLD fields follow si_signo, si_errno and si_code, aligned
	// as a pointer: si_pid, si_uid, si_status.
	fields := unsafe.Add(unsafe.Pointer(&info), (3*4+unsafe.Sizeof(uintptr(0))-1)/unsafe.Sizeof(uintptr(0))*unsafe.Sizeof(uintptr(0)))
	if *(*int32)(fields) != int32(pid) {
		return 0, 0, false
	}
	return info.Code, *(*int32)(unsafe.Add(fields, 8)), true
}

// handOff replaces this process with the supervisor's idle holder,
// watching the supervisor's socket (the descriptor listener), the init's
// control socket and the proxy's listeners; the holder runs argv with the
// state descriptor added. It returns only when that failed, having closed
// what it opened (listener stays the caller's).
func (s *Sandbox) handOff(store, id string, listener int, argv []string) error {
	if s.run.plan.ca != nil {
		// Its CA's key and its secrets' values live in this process only.
		return errors.New("a sandbox whose proxy holds secrets or intercepts TLS keeps its supervisor")
	}
	st, fds, err := s.captureState()
	if err != nil {
		return err
	}
	defer func() { closeFDs(fds) }() // all of them, appended below too
	lfd, err := unix.Dup(listener)
	if err != nil {
		return os.NewSyscallError("dup", err)
	}
	fds = append(fds, lfd)
	st.Store, st.ID, st.Listener = store, id, lfd
	mfd, err := ctlmsg.WriteState("tent-supervisor-state", st)
	if err != nil {
		return err
	}
	fds = append(fds, mfd)
	watch := append(append([]int{lfd, st.Control}, st.Proxy...), st.PublishedFDs...)
	argv = append(slices.Clip(argv), strconv.Itoa(mfd))
	// Stop accepting proxy connections (new ones wait in the listeners'
	// backlogs, which the holder watches), so that the last check below
	// sees every connection this process has accepted: one accepted but
	// not yet counted would otherwise be cut by the exec.
	s.mu.Lock()
	proxy := s.run.proxy
	s.mu.Unlock()
	if proxy != nil {
		if err := proxy.Pause(); err != nil {
			return err
		}
		defer proxy.Resume() // reached only if the hand-off fails
	}
	// Published ports likewise: connections wait in the backlogs.
	if pub := s.run.pub; pub != nil {
		pub.stop()
		defer func() { _ = pub.start() }()
	}
	if !s.quiet() { // a proxied connection came in meanwhile
		return errors.New("the sandbox became busy")
	}
	return namespaces.ExecSupervisorHolder(st.Deadline, watch, st.Control, argv)
}

// adopt rebuilds, in the process the supervisor's idle holder exec'd, the
// sandbox its predecessor handed off (stateFD: the descriptor the holder
// passed). On failure the sandbox is ended: nothing could serve it.
func adopt(stateFD string, popts ProvisionOptions) (*Sandbox, handoff.Resumed, error) {
	st, err := readSupervisedState(stateFD)
	if err != nil {
		return nil, handoff.Resumed{}, err
	}
	r := handoff.Resumed{Store: st.Store, ID: st.ID, Listener: st.Listener}
	sb, err := adoptSandbox(st, popts)
	if err != nil {
		_ = syscall.Kill(st.InitPID, syscall.SIGKILL)
		if st.Cgroup != nil {
			if cg, cerr := cgroups.Reopen(*st.Cgroup); cerr == nil {
				_ = cg.Destroy(context.Background())
			}
		}
		_ = removeLayers(st.CowRoot)
		return nil, r, fmt.Errorf("resuming the supervisor of %s: %w", st.ID, err)
	}
	return sb, r, nil
}

// readSupervisedState reads the state handOffSupervisor left in the
// descriptor arg and closes it; the descriptors it names are made
// close-on-exec.
func readSupervisedState(arg string) (*supervisedState, error) {
	var st supervisedState
	if err := ctlmsg.ReadState(arg, &st); err != nil {
		return nil, fmt.Errorf("resuming a supervisor: %w", err)
	}
	if st.ID == "" || st.Store == "" || st.InitPID <= 0 || st.Control < 3 || st.Listener < 3 {
		return nil, errors.New("resuming a supervisor: incomplete state")
	}
	for _, fd := range append(append([]int{st.Control, st.Listener}, st.Proxy...), st.PublishedFDs...) {
		unix.CloseOnExec(fd)
	}
	if len(st.Published) != len(st.PublishedFDs) {
		return nil, errors.New("resuming a supervisor: published ports and sockets differ")
	}
	return &st, nil
}

// adoptSandbox rebuilds the *Sandbox that st describes around its running
// init (a child of this process).
func adoptSandbox(st *supervisedState, popts ProvisionOptions) (_ *Sandbox, err error) {
	log := popts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	r := &running{
		plan: &plan{cfg: st.Config, privileged: st.Privileged, uid: st.UID, gid: st.GID,
			cowRoot: st.CowRoot, layers: st.Layers, report: st.Report,
			defaultSeccomp: st.Spec.Seccomp.keepsDefault()},
		start: st.Start, timedOut: make(chan struct{}),
	}
	// The sandbox's host identity: whose tent's stdio pipes must be (see
	// stdioOwner), and what a root caller's mounts map onto.
	r.plan.opts.UIDMap = syscall.SysProcIDMap{ContainerID: int(st.UID), HostID: st.HostUID, Size: 1}
	r.plan.opts.GIDMap = syscall.SysProcIDMap{ContainerID: int(st.GID), HostID: st.HostGID, Size: 1}
	// The capabilities commands keep (validated when the sandbox
	// started).
	r.plan.caps, r.plan.ambient, _ = capabilityMasks(st.Spec.Capabilities, st.Spec.AmbientCapabilities, "")
	if rng := st.Spec.IDRange; rng != nil {
		r.plan.mapRange(rng)
	}
	defer func() {
		if err != nil {
			closeFDs(r.proxyFDs)
		}
	}()
	if st.Cgroup != nil {
		if r.cg, err = cgroups.Reopen(*st.Cgroup); err != nil {
			return nil, err
		}
	}
	if r.init, err = namespaces.Adopt(st.InitPID, st.Control, log); err != nil {
		return nil, err
	}
	if len(st.Proxy) > 0 {
		compiled, err := netpolicy.Compile(st.Spec.Network)
		if err != nil {
			return nil, err
		}
		for _, fd := range st.Proxy {
			d, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0)
			if err != nil {
				return nil, os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", err)
			}
			r.proxyFDs = append(r.proxyFDs, d)
		}
		pcfg := popts.ProxyLimits.proxyConfig(st.ID)
		pcfg.FakeNames, pcfg.Secrets = st.FakeNames, popts.Secrets
		if r.proxy, err = startProxy(pcfg, compiled, st.Proxy, popts.NetLog, popts.Resolver, log); err != nil {
			return nil, err
		}
	}
	go r.init.Serve()
	if r.plan.cfg.Loopback { // its own network namespace: ports can be published
		r.pub = newPublisher(r.init, log)
		for i, m := range st.Published {
			if err := r.pub.adopt(m, st.PublishedFDs[i]); err != nil {
				r.pub.close()
				return nil, err
			}
		}
	}
	s := &Sandbox{id: st.ID, spec: st.Spec, run: r, ended: make(chan struct{}), created: time.Now(), nextExec: st.NextExec,
		suspended: st.Suspended, deadline: st.Deadline}
	r.stop = func() bool { return true }
	if !st.Deadline.IsZero() {
		timer := time.AfterFunc(time.Until(st.Deadline), func() { _ = s.Terminate(context.Background()) })
		r.stop = timer.Stop
	}
	log.Debug("supervisor resumed", "init", st.InitPID)
	return s, nil
}
