package supervised

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/internal/handoff"
)

// superviseNew serves a newly provisioned sb: it listens at its socket,
// saves rec (state running, this process as its supervisor), calls ready
// and serves until the sandbox is removed, ends, or ctx is done.
func superviseNew(ctx context.Context, st stateDir, rec *record, sb *sandbox.Sandbox, o launch, ready func()) error {
	if err := st.ensure(); err != nil {
		_ = sb.Terminate(context.Background())
		return err
	}
	// The service is ready before anyone learns of the sandbox; one that
	// is not ends it, record and all, before there is one.
	svc, err := startService(ctx, sb)
	if err != nil {
		_ = sb.Terminate(context.Background())
		return err
	}
	o.service = svc
	sock := st.SocketPath(rec.ID)
	_ = os.Remove(sock)
	var l *net.UnixListener
	err = shortPath(sock, func(p string) (err error) {
		l, err = net.ListenUnix("unixpacket", &net.UnixAddr{Name: p, Net: "unixpacket"})
		return err
	})
	if err == nil && len(sock) >= 100 {
		// Removed by its name (removeFiles, keepEnded): the one it was
		// bound with was a descriptor's.
		l.SetUnlinkOnClose(false)
	}
	if err != nil {
		_ = sb.Terminate(context.Background())
		return fmt.Errorf("control socket: %w", err)
	}
	rec.State, rec.Supervisor, rec.Socket = sandbox.StateRunning, os.Getpid(), sock
	rec.SupervisorStart = namespaces.StartTicks(rec.Supervisor)
	info := sb.Info()
	rec.Spec, rec.Protections, rec.Layers, rec.Cgroups, rec.InitPID = info.Spec, info.Protections, info.Layers, info.CgroupPaths, info.InitPID
	if err := st.Save(rec); err != nil {
		l.Close()
		_ = os.Remove(sock)
		_ = sb.Terminate(context.Background())
		return fmt.Errorf("saving the state record: %w", err)
	}
	ready()
	return serve(ctx, st, rec, sb, l, o)
}

// serve serves sb's requests on l until it is removed, ends, or ctx is
// done; then it terminates sb and removes its record — but for a sandbox
// that ended on its own (its Limits.Timeout, its init gone), whose record
// stays, as stopped with the reason, until it is removed (as docker ps -a
// shows exited containers). An idle supervisor trims its memory and hands
// off to its idle holder (see idle_linux.go).
func serve(ctx context.Context, st stateDir, rec *record, sb *sandbox.Sandbox, l *net.UnixListener, o launch) error {
	defer sb.Terminate(context.Background())
	defer l.Close()
	ended, reason := false, ""
	var recMu sync.Mutex // the record's updates and saves
	defer func() {
		if !ended {
			_ = st.removeFiles(rec.ID)
			return
		}
		recMu.Lock()
		defer recMu.Unlock()
		if reason == "" {
			reason = handoff.Ended(sb)
		}
		_ = st.keepEnded(rec, reason)
	}()
	// The init's death ends the sandbox (its processes died with it):
	// the record says stopped, and why (handoff.Ended).
	initGone, stopWatch := watchExit(sb.Info().InitPID)
	defer stopWatch()
	// The service, kept running until serve returns (before sb ends:
	// defers run last in, first out).
	svcCtx, svcStop := context.WithCancel(context.Background())
	svcDone := make(chan struct{})
	go func() {
		defer close(svcDone)
		keepService(svcCtx, sb, o.service, o.logger())
	}()
	defer func() { svcStop(); <-svcDone }()
	s := &server{st: st, rec: rec, sb: sb, recMu: &recMu, removed: make(chan struct{}, 1), stopped: make(chan struct{}, 1), main: o.main}
	activity := make(chan struct{}, 1)
	var inflight atomic.Int64
	var accepting chan struct{} // closed when the accept loop returns
	accept := func() {
		done := make(chan struct{})
		accepting = done
		go func() {
			defer close(done)
			for {
				conn, err := l.AcceptUnix()
				if err != nil {
					return
				}
				inflight.Add(1)
				select {
				case activity <- struct{}{}:
				default:
				}
				go func() {
					defer inflight.Add(-1)
					s.serveConn(conn)
				}()
			}
		}()
	}
	accept()
	resumeArgs := o.resumeArgs(st, rec.ID)
	idle := namespaces.NewIdleTimer(o.IdleAfter, len(resumeArgs) > 0)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-s.removed:
			return nil
		case <-s.stopped:
			ended, reason = true, StopReason
			return nil
		case <-sb.Done():
			ended = true
			return nil
		case <-initGone:
			ended = true
			return nil
		case <-o.main.exited():
			ended, reason = true, fmt.Sprintf("its main command exited (status %d)", o.main.code)
			return nil
		case <-activity:
			idle.Reset()
		case <-idle.C:
			if !idle.Fired(inflight.Load() > 0 || !handoff.Quiet(sb)) {
				continue
			}
			// Stop accepting (a deadline in the past ends the loop), then
			// look again: a request accepted meanwhile is in flight.
			if err := l.SetDeadline(time.Unix(1, 0)); err != nil {
				idle.HandOffFailed()
				continue
			}
			<-accepting
			_ = l.SetDeadline(time.Time{})
			if inflight.Load() == 0 && handoff.Quiet(sb) {
				_ = handOff(st, rec, sb, l, o) // returns only on failure
			}
			accept()
			idle.HandOffFailed()
		}
	}
}

// server is one supervisor's state for its connections.
type server struct {
	st      stateDir
	rec     *record
	sb      *sandbox.Sandbox
	recMu   *sync.Mutex
	removed chan struct{}
	stopped chan struct{} // Handle.Stop: ended, its record kept
	main    *mainRun      // a child supervisor's main command, or nil
}

// save applies update to the record and saves it, one at a time.
func (s *server) save(update func()) error {
	s.recMu.Lock()
	defer s.recMu.Unlock()
	update()
	return s.st.Save(s.rec)
}

func (s *server) serveConn(conn *net.UnixConn) {
	defer conn.Close()
	if err := checkPeer(conn); err != nil {
		refusePeer(conn, err)
		return
	}
	var req request
	fds, err := ctlmsg.Recv(conn, &req)
	if err != nil {
		return
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "stdio")
		defer files[i].Close()
	}
	if req.Op == opExec {
		serveExec(conn, s.sb, req, files)
		return
	}
	if s.serveProc(conn, req, files) {
		return
	}
	if s.serveFile(conn, req, files) {
		return
	}
	if req.Op == opDial {
		s.serveDial(conn, req.Port)
		return
	}
	if req.Op == opRemove || req.Op == opStop {
		// Answer first: the caller then waits for the supervisor to exit,
		// which it does once the teardown is done.
		_ = ctlmsg.Send(conn, reply{}, nil)
		if req.Op == opStop {
			s.stopped <- struct{}{}
		} else {
			s.removed <- struct{}{}
		}
		return
	}
	var rep reply
	if err := s.do(req, files, &rep); err != nil {
		rep = failure(err)
	}
	_ = ctlmsg.Send(conn, rep, nil)
}

// serveDial connects to port inside the sandbox and answers with the
// connection's descriptor.
func (s *server) serveDial(conn *net.UnixConn, port int) {
	c, err := s.sb.DialPort(context.Background(), port)
	if err != nil {
		_ = ctlmsg.Send(conn, failure(err), nil)
		return
	}
	defer c.Close()
	rc, err := c.(syscall.Conn).SyscallConn()
	if err != nil {
		_ = ctlmsg.Send(conn, failure(err), nil)
		return
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		_ = ctlmsg.Send(conn, failure(os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", errors.Join(err, derr))), nil)
		return
	}
	defer unix.Close(fd)
	_ = ctlmsg.Send(conn, reply{}, []int{fd})
}

// do runs one request that is not a session.
func (s *server) do(req request, files []*os.File, rep *reply) error {
	ctx := context.Background()
	sb := s.sb
	switch req.Op {
	case opFile:
		if len(files) != 3 || req.File == nil {
			return fmt.Errorf("%w: a file operation needs its arguments and three descriptors", sandbox.ErrInvalidSpec)
		}
		fr := *req.File
		fr.In, fr.Out = files[0], files[1]
		return sb.File(ctx, fr)
	case opNet:
		if req.Network == nil {
			return fmt.Errorf("%w: net needs a policy", sandbox.ErrInvalidSpec)
		}
		if err := sb.SetNetworkPolicy(ctx, *req.Network); err != nil {
			return err
		}
		// The policy as it is now: with the variables kept (names, hosts
		// and placeholders; the values are in the secret store).
		p := sb.Info().Spec.Network
		return s.save(func() { s.rec.Spec.Network = p })
	case opMount:
		if req.Mount == nil {
			return fmt.Errorf("%w: mount needs a mount", sandbox.ErrInvalidSpec)
		}
		if err := sb.Mount(ctx, *req.Mount); err != nil {
			return err
		}
		info := sb.Info()
		return s.save(func() { s.rec.Spec, s.rec.Layers = info.Spec, info.Layers })
	case opLimits:
		if req.Limits == nil {
			return fmt.Errorf("%w: limits needs limits", sandbox.ErrInvalidSpec)
		}
		if err := sb.SetLimits(ctx, *req.Limits); err != nil {
			return err
		}
		limits := sb.Info().Spec.Limits
		return s.save(func() { s.rec.Spec.Limits = limits })
	case opSnapshot:
		snap, err := sb.Snapshot(ctx, s.st.SnapshotsDir(), sandbox.SnapshotOptions{SandboxID: s.rec.ID, IncludeReadWrite: req.IncludeReadWrite})
		if err != nil {
			return err
		}
		rep.Snapshot = snap.ID
		return nil
	case opPublish:
		if req.Publish == nil {
			return fmt.Errorf("%w: publish needs a port", sandbox.ErrInvalidSpec)
		}
		m, err := sb.Publish(ctx, *req.Publish)
		if err != nil {
			return err
		}
		rep.Published = &m
		return s.save(func() { s.rec.Spec = sb.Info().Spec })
	case opMainStart, opMainSignal, opMainState:
		return s.serveMain(req, rep)
	case opSuspend, opResume:
		var err error
		if req.Op == opSuspend {
			err = sb.Suspend(ctx)
		} else {
			err = sb.Resume(ctx)
		}
		if err != nil {
			return err
		}
		return s.save(func() {
			s.rec.State = sandbox.StateRunning
			if sb.Info().State == sandbox.StateSuspended {
				s.rec.State = sandbox.StateSuspended
			}
		})
	}
	return fmt.Errorf("%w: %s %q", sandbox.ErrInvalidSpec, olderSupervisor, req.Op)
}

// refusePeer answers a peer that failed checkPeer, without acting on its
// request: it drains what the peer sent (closing any descriptors), for a
// second at most, so that closing the connection does not reset it
// before the peer has read the answer.
func refusePeer(conn *net.UnixConn, why error) {
	_ = ctlmsg.Send(conn, reply{Code: 125, Error: why.Error(), Kind: "other"}, nil)
	_ = conn.CloseWrite()
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	for i := 0; i < 4; i++ {
		var discard json.RawMessage
		fds, err := ctlmsg.Recv(conn, &discard)
		closeFDs(fds)
		if err != nil {
			return
		}
	}
}

// closeFDs closes descriptors received and not used.
func closeFDs(fds []int) { ctlmsg.Close(fds) }

// watchExit returns a channel closed when process pid exits (a pidfd
// becoming readable, through the runtime's poller), and the function
// that stops watching. A pid that cannot be watched (0, gone already
// and reaped) gives a channel that is never closed.
func watchExit(pid int) (<-chan struct{}, func()) {
	exited := make(chan struct{})
	if pid <= 0 {
		return exited, func() {}
	}
	fd, err := unix.PidfdOpen(pid, unix.PIDFD_NONBLOCK)
	if err != nil {
		return exited, func() {}
	}
	f := os.NewFile(uintptr(fd), "pidfd")
	rc, err := f.SyscallConn()
	if err != nil {
		f.Close()
		return exited, func() {}
	}
	go func() {
		err := rc.Read(func(fd uintptr) bool {
			n, err := unix.Poll([]unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}, 0)
			return err == nil && n > 0
		})
		if err == nil {
			close(exited)
		}
	}()
	return exited, func() { f.Close() }
}
