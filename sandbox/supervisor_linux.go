package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	iofs "io/fs"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
)

// A supervisor owns one long-lived sandbox on behalf of other processes
// (the tent CLI's create/exec/net/rm): it serves a SOCK_SEQPACKET control
// socket in the state directory, one JSON request per connection, with
// the caller's stdin, stdout and stderr attached (SCM_RIGHTS) for execs.

// remoteRequest is one request to a supervisor.
type remoteRequest struct {
	Op      string        `json:"op"` // exec, net, attach, snapshot, suspend, resume, rm
	Args    []string      `json:"args,omitempty"`
	Env     []string      `json:"env,omitempty"`
	Dir     string        `json:"dir,omitempty"`
	Timeout time.Duration `json:"timeout_ns,omitempty"`
	// MaxOutput caps each output stream (see ExecRequest.MaxOutput).
	MaxOutput int64          `json:"max_output,omitempty"`
	Network   *NetworkPolicy `json:"network,omitempty"`
	// Mount is the mount of an attach.
	Mount *Mount `json:"mount,omitempty"`
	// IncludeReadWrite asks a snapshot to archive the rw mounts too.
	IncludeReadWrite bool `json:"include_rw,omitempty"`
	// FileHelper runs tent's file helper with Args (see Sandbox.ReadFile).
	FileHelper bool `json:"file_helper,omitempty"`
}

// remoteReply is a supervisor's answer.
type remoteReply struct {
	Error  string      `json:"error,omitempty"`
	Code   int         `json:"code"` // tent's exit code for a failure to start
	Result *ExecResult `json:"result,omitempty"`
	// Blocked summarises the connections the network policy refused
	// during an exec.
	Blocked string `json:"blocked,omitempty"`
	// Snapshot is the id of a snapshot just taken.
	Snapshot string `json:"snapshot,omitempty"`
}

// Supervise serves sb at store.SocketPath(rec.ID), saves rec (state
// running, this process as its supervisor) and calls ready; it returns
// once the sandbox is removed (a remote rm), terminated, or ctx is done,
// and then terminates the sandbox and removes its record. It never hands
// off to the idle holder (see [SuperviseWith]).
func Supervise(ctx context.Context, store Store, rec *Record, sb *Sandbox, ready func()) error {
	return SuperviseWith(ctx, store, rec, sb, SuperviseOptions{Ready: ready})
}

// SuperviseWith is [Supervise] with options: an idle supervisor may give
// way to its idle holder and come back in a new process image, through
// opts.ResumeArgs and [ResumeSupervisor].
func SuperviseWith(ctx context.Context, store Store, rec *Record, sb *Sandbox, opts SuperviseOptions) error {
	if err := os.MkdirAll(store.Dir, 0o700); err != nil {
		_ = sb.Terminate(context.Background())
		return err
	}
	sock := store.SocketPath(rec.ID)
	_ = os.Remove(sock)
	l, err := net.ListenUnix("unixpacket", &net.UnixAddr{Name: sock, Net: "unixpacket"})
	if err != nil {
		_ = sb.Terminate(context.Background())
		return fmt.Errorf("control socket: %w", err)
	}
	rec.State, rec.Supervisor, rec.Socket = "running", os.Getpid(), sock
	rec.SupervisorStart = procStartTicks(rec.Supervisor)
	rec.Spec, rec.Protections, rec.Layers = sb.Spec(), sb.Protections(), sb.CowLayers()
	rec.Cgroups = sb.run.plan.report.CgroupPaths
	if err := store.Save(rec); err != nil {
		l.Close()
		_ = sb.Terminate(context.Background())
		return fmt.Errorf("saving the state record: %w", err)
	}
	if opts.Ready != nil {
		opts.Ready()
	}
	return serveSupervised(ctx, store, rec, sb, l, opts)
}

// serveSupervised serves sb's requests on l until it is removed,
// terminated, or ctx is done; then it terminates sb and removes its
// record. An idle supervisor trims its memory and, with
// opts.ResumeArgs, hands off to its idle holder.
func serveSupervised(ctx context.Context, store Store, rec *Record, sb *Sandbox, l *net.UnixListener, opts SuperviseOptions) error {
	defer sb.Terminate(context.Background())
	defer l.Close()
	// A sandbox that ended on its own (its Limits.Timeout, its init gone)
	// keeps its record, as stopped with the reason, until tent rm (as
	// docker ps -a shows exited containers); one removed or whose
	// supervisor was told to stop goes with its record.
	ended := false
	var recMu sync.Mutex // the record's updates and saves
	defer func() {
		if !ended {
			_ = store.removeFiles(rec.ID)
			return
		}
		recMu.Lock()
		defer recMu.Unlock()
		_ = store.keepEnded(rec, sb)
	}()
	removed := make(chan struct{}, 1)
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
					serveRemote(conn, sb, store, rec, &recMu, removed)
				}()
			}
		}()
	}
	accept()
	// Like the init, an idle supervisor trims its memory and then, with
	// nothing in flight, execs its idle holder.
	idle := namespaces.NewIdleTimer(opts.IdleAfter, len(opts.ResumeArgs) > 0)
	defer idle.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-removed:
			return nil
		case <-sb.Done():
			ended = true
			return nil
		case <-activity:
			idle.Reset()
		case <-idle.C:
			if !idle.Fired(inflight.Load() > 0 || !sb.quiet()) {
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
			if inflight.Load() == 0 && sb.quiet() {
				_ = handOffSupervisor(store, rec, sb, l, opts) // returns only on failure
			}
			accept()
			idle.HandOffFailed()
		}
	}
}

func serveRemote(conn *net.UnixConn, sb *Sandbox, store Store, rec *Record, recMu *sync.Mutex, removed chan<- struct{}) {
	defer conn.Close()
	// save applies update to the record and saves it, one request at a time.
	save := func(update func()) error {
		recMu.Lock()
		defer recMu.Unlock()
		update()
		return store.Save(rec)
	}
	if err := checkPeer(conn); err != nil {
		refusePeer(conn, err)
		return
	}
	var req remoteRequest
	fds, err := ctlmsg.Recv(conn, &req)
	if err != nil {
		return
	}
	files := make([]*os.File, len(fds))
	for i, fd := range fds {
		files[i] = os.NewFile(uintptr(fd), "stdio")
		defer files[i].Close()
	}
	var reply remoteReply
	switch req.Op {
	case opExecSession:
		serveExecSession(conn, sb, req, files)
		return
	case "exec":
		if len(files) != 3 {
			reply = remoteReply{Code: 125, Error: "exec needs the caller's stdin, stdout and stderr"}
			break
		}
		// The caller going away (Ctrl-C, kill) cancels the exec.
		ctx, cancel := context.WithCancel(context.Background())
		go func() { _, _ = conn.Read(make([]byte, 1)); cancel() }()
		before := sb.NetworkDenied()
		res, err := sb.exec(ctx, ExecRequest{Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, MaxOutput: req.MaxOutput,
			Stdin: files[0], Stdout: files[1], Stderr: files[2]}, req.FileHelper)
		cancel()
		if res == nil {
			reply = remoteReply{Code: ExitCode(err), Error: err.Error()}
			break
		}
		reply = remoteReply{Result: res, Blocked: netpolicy.Summary(deniedSince(before, sb.NetworkDenied()))}
	case "net":
		if req.Network == nil {
			reply = remoteReply{Code: 125, Error: "net needs a policy"}
			break
		}
		if err := sb.SetNetworkPolicy(context.Background(), *req.Network); err != nil {
			reply = remoteReply{Code: 125, Error: err.Error()}
			break
		}
		if err := save(func() { rec.Spec.Network = *req.Network }); err != nil {
			reply = remoteReply{Code: 125, Error: err.Error()}
		}
	case "attach":
		if req.Mount == nil {
			reply = remoteReply{Code: 125, Error: "attach needs a mount"}
			break
		}
		if err := sb.Mount(context.Background(), *req.Mount); err != nil {
			reply = remoteReply{Code: 125, Error: err.Error()}
			break
		}
		if err := save(func() { rec.Spec, rec.Layers = sb.Spec(), sb.CowLayers() }); err != nil {
			reply = remoteReply{Code: 125, Error: err.Error()}
		}
	case "snapshot":
		snap, err := sb.Snapshot(context.Background(), store.SnapshotsDir(), SnapshotOptions{SandboxID: rec.ID, IncludeReadWrite: req.IncludeReadWrite})
		if err != nil {
			reply = remoteReply{Code: 125, Error: err.Error()}
			break
		}
		reply = remoteReply{Snapshot: snap.ID}
	case "suspend", "resume":
		var err error
		if req.Op == "suspend" {
			err = sb.Suspend(context.Background())
		} else {
			err = sb.Resume(context.Background())
		}
		if err != nil {
			reply = remoteReply{Code: 125, Error: err.Error()}
			break
		}
		if err := save(func() { rec.State = map[bool]string{true: "suspended", false: "running"}[sb.Suspended()] }); err != nil {
			reply = remoteReply{Code: 125, Error: err.Error()}
		}
	case "rm":
		// Answer first: the caller then waits for the supervisor to exit,
		// which it does once the teardown is done.
		_ = ctlmsg.Send(conn, reply, nil)
		removed <- struct{}{}
		return
	default:
		reply = remoteReply{Code: 125, Error: fmt.Sprintf("unknown operation %q", req.Op)}
	}
	_ = ctlmsg.Send(conn, reply, nil)
}

// refusePeer answers a peer that failed checkPeer, without acting on its
// request: it drains what the peer sent (closing any descriptors), for a
// second at most, so that closing the connection does not reset it
// before the peer has read the answer.
func refusePeer(conn *net.UnixConn, why error) {
	_ = ctlmsg.Send(conn, remoteReply{Code: 125, Error: why.Error()}, nil)
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

// deniedSince returns the denials in after beyond those in before (what
// happened during one exec, give or take a concurrent one).
func deniedSince(before, after []netpolicy.Denial) []netpolicy.Denial {
	type key struct {
		host   string
		port   int
		reason string
	}
	seen := map[key]int{}
	for _, d := range before {
		seen[key{d.Host, d.Port, d.Reason}] = d.Count
	}
	var out []netpolicy.Denial
	for _, d := range after {
		if n := d.Count - seen[key{d.Host, d.Port, d.Reason}]; n > 0 {
			d.Count = n
			out = append(out, d)
		}
	}
	return out
}

// ErrStopped is returned for a sandbox whose supervisor is gone.
var ErrStopped = errors.New("sandbox stopped")

// call sends one request to rec's supervisor and reads the answer; an
// answer that reports a failure is a *RemoteError.
func call(rec *Record, req remoteRequest, fds []int) (remoteReply, error) {
	if rec.State != "running" && rec.State != "suspended" {
		return remoteReply{}, fmt.Errorf("%w: %s is %s, its supervisor is gone (tent rm %s cleans up)", ErrStopped, rec.ID, rec.State, rec.ID)
	}
	conn, err := net.DialUnix("unixpacket", nil, &net.UnixAddr{Name: rec.Socket, Net: "unixpacket"})
	if err != nil {
		return remoteReply{}, fmt.Errorf("%w: %s: %v", ErrStopped, rec.ID, err)
	}
	defer conn.Close()
	if err := ctlmsg.Send(conn, req, fds); err != nil {
		return remoteReply{}, err
	}
	var reply remoteReply
	if _, err := ctlmsg.Recv(conn, &reply); err != nil {
		return remoteReply{}, fmt.Errorf("sandbox %s: no answer: %w", rec.ID, err)
	}
	if reply.Error != "" {
		return reply, &RemoteError{Code: reply.Code, Msg: reply.Error}
	}
	return reply, nil
}

// RemoteExec runs req in the sandbox rec names, through its supervisor,
// with stdin, stdout and stderr passed as they are (req's readers and
// writers are ignored): the output streams to them and the result holds
// none. With req.MaxOutput positive the supervisor copies each output
// stream to its file up to that many bytes and flags the truncation in
// the result. blocked summarises the connections the network policy
// refused meanwhile.
func RemoteExec(rec *Record, req ExecRequest, stdio [3]*os.File) (res *ExecResult, blocked string, err error) {
	fds := []int{int(stdio[0].Fd()), int(stdio[1].Fd()), int(stdio[2].Fd())}
	reply, err := call(rec, remoteRequest{Op: "exec", Args: req.Args, Env: req.Env, Dir: req.Dir, Timeout: req.Timeout, MaxOutput: req.MaxOutput}, fds)
	if err != nil {
		return nil, "", err
	}
	if reply.Result == nil {
		return nil, "", &RemoteError{Code: reply.Code, Msg: reply.Error}
	}
	return reply.Result, reply.Blocked, nil
}

// RemoteFile runs one file operation (read, write, list, stat, remove,
// remove-all; see Sandbox.ReadFile) on path inside the sandbox rec names,
// with in as the file helper's stdin and out as its stdout: read streams
// the file to out, write streams in into the file (extra: the octal mode).
func RemoteFile(rec *Record, op, path string, extra []string, in, out *os.File) error {
	pr, pw, err := os.Pipe()
	if err != nil {
		return err
	}
	defer pr.Close()
	errOut := make(chan string, 1)
	go func() { b, _ := io.ReadAll(pr); errOut <- string(b) }()
	reply, err := call(rec, remoteRequest{Op: "exec", FileHelper: true, Args: append([]string{op, path}, extra...)},
		[]int{int(in.Fd()), int(out.Fd()), int(pw.Fd())})
	pw.Close()
	stderr := <-errOut
	if err != nil {
		return err
	}
	if reply.Result == nil {
		return &RemoteError{Code: reply.Code, Msg: reply.Error}
	}
	return fileResult(op, path, reply.Result, stderr)
}

// RemoteSnapshot snapshots the sandbox rec names into the store's
// snapshots directory and returns the snapshot's id. Of opts, only
// IncludeReadWrite applies (the supervisor names the snapshot).
func RemoteSnapshot(rec *Record, opts SnapshotOptions) (string, error) {
	reply, err := call(rec, remoteRequest{Op: "snapshot", IncludeReadWrite: opts.IncludeReadWrite}, nil)
	return reply.Snapshot, err
}

// RemoteSuspend freezes, and RemoteResume thaws, the sandbox rec names.
func RemoteSuspend(rec *Record) error { return remoteOp(rec, "suspend") }

// RemoteResume thaws the sandbox rec names (see [RemoteSuspend]).
func RemoteResume(rec *Record) error { return remoteOp(rec, "resume") }

func remoteOp(rec *Record, op string) error {
	_, err := call(rec, remoteRequest{Op: op}, nil)
	return err
}

// RemoteSetNetworkPolicy replaces the network rules of the sandbox rec
// names, through its supervisor.
func RemoteSetNetworkPolicy(rec *Record, p NetworkPolicy) error {
	_, err := call(rec, remoteRequest{Op: "net", Network: &p}, nil)
	return err
}

// RemoteAttach adds m to the running sandbox rec names (see
// [Sandbox.Mount]), through its supervisor, which records the new spec.
func RemoteAttach(rec *Record, m Mount) error {
	_, err := call(rec, remoteRequest{Op: "attach", Mount: &m}, nil)
	return err
}

// Remove terminates the sandbox rec names and removes its record. Of a
// sandbox whose supervisor is gone (killed: its processes died with it,
// or die once their frozen cgroup is thawed) it reclaims what is left
// (see [Store.Reclaim]) before removing the record.
func (s Store) Remove(rec *Record) error {
	if rec.State == "running" || rec.State == "suspended" {
		if _, err := call(rec, remoteRequest{Op: "rm"}, nil); err != nil && !errors.Is(err, ErrStopped) {
			return err
		}
		// The supervisor exits once its teardown is done.
		for i := 0; i < 500 && supervisorAlive(rec); i++ {
			time.Sleep(10 * time.Millisecond)
		}
	}
	s.Reclaim(rec)
	return s.removeFiles(rec.ID)
}

// Reclaim removes what a sandbox whose supervisor was killed could not:
// its cow layers, its cgroups (see reclaimCgroups), the temporary
// directory of a snapshot it was taking and the temporary file of a
// record it was saving. The record itself stays.
//
// Only what has the shape tent gives it is touched (see cowRootOf and
// validCgroupDir): a record is data, and data may lie.
func (s Store) Reclaim(rec *Record) {
	if !validID(rec.ID) || s.checkDir() != nil {
		return
	}
	for _, l := range rec.Layers {
		if root, ok := cowRootOf(l.Upper, os.Geteuid()); ok {
			_ = removeLayers(root)
		}
	}
	reclaimCgroups(rec.Cgroups)
	removeSnapshotTemps(s.SnapshotsDir(), rec.ID)
	if temps, err := filepath.Glob(filepath.Join(s.Dir, "."+rec.ID+".*.tmp")); err == nil {
		for _, t := range temps {
			_ = os.Remove(t)
		}
	}
}

// reclaimCgroups removes the cgroup directories of a sandbox whose
// supervisor is gone (one per hierarchy on cgroup v1). Its processes got
// SIGKILL when their init died with the supervisor, but a frozen cgroup
// (the supervisor was killed during a snapshot or while suspended) keeps
// them on cgroup v1 until it is thawed: so thaw every directory, SIGKILL
// whatever they still list, and remove them, children first, retrying
// for a second while the processes leave. Directories that are not
// tent's cgroups (validCgroupDir) are left alone.
func reclaimCgroups(paths []string) {
	var dirs []string // each cgroup's subtree, deepest first
	for _, dir := range paths {
		if !validCgroupDir(dir) {
			continue
		}
		var sub []string
		_ = filepath.WalkDir(dir, func(p string, d iofs.DirEntry, err error) error {
			if err == nil && d.IsDir() {
				sub = append([]string{p}, sub...)
			}
			return nil
		})
		dirs = append(dirs, sub...)
	}
	for _, d := range dirs {
		writeCgroupFile(filepath.Join(d, "freezer.state"), "THAWED") // v1
		writeCgroupFile(filepath.Join(d, "cgroup.freeze"), "0")      // v2
	}
	for _, d := range dirs {
		for i := 0; i < 100; i++ {
			err := os.Remove(d)
			if err == nil || errors.Is(err, os.ErrNotExist) {
				break
			}
			if b, err := os.ReadFile(filepath.Join(d, "cgroup.procs")); err == nil {
				for _, f := range strings.Fields(string(b)) {
					if pid, err := strconv.Atoi(f); err == nil {
						_ = syscall.Kill(pid, syscall.SIGKILL)
					}
				}
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

// writeCgroupFile writes an existing cgroup control file; errors (a file
// the hierarchy does not have) are ignored.
func writeCgroupFile(path, value string) {
	f, err := os.OpenFile(path, os.O_WRONLY, 0)
	if err != nil {
		return
	}
	_, _ = f.WriteString(value)
	f.Close()
}

// RemoteError is a supervisor's refusal, with tent's exit code for it.
type RemoteError struct {
	Code int
	Msg  string
}

func (e *RemoteError) Error() string { return e.Msg }
