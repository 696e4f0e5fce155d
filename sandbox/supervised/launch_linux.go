package supervised

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/internal/reexec"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/secretstore"
)

// The supervisor's two program modes (see the re-exec contract in package
// sandbox's documentation):
//
//   - modeSupervise: started by [Backend.Provision] (and Fork, and Resume
//     of a stopped sandbox) from /proc/self/exe, with the state directory
//     and the sandbox's id as arguments (for ps), in its own session, its
//     stdout and stderr the sandbox's log file in the state directory.
//     fd 3 is the ready pipe: it writes "ok", or "error CODE KIND
//     MESSAGE", once the sandbox is served or refused. fd 4 carries the
//     launch (JSON, never argv: --env values are secrets and argv is
//     public), then, after "ok", the creator's "ack": a creator that ends
//     without it (killed before it read the id) leaves no one who knows
//     the sandbox, which the supervisor then ends. It exits when the sandbox is removed, on SIGTERM, SIGINT or
//     SIGHUP, or when the sandbox ends; status 0, or 1 after a failure
//     that has been reported on fd 3. A child supervisor
//     ([Backend.LaunchChild], launch.Main set) has the container's stdio
//     as fds 0-2, its log on fd 5, its terminal on fd 6 (a SIGHUP then
//     goes to its main command), and exits with its main command's
//     status (see child_linux.go).
//   - modeResume: exec'd by the supervisor's idle holder; argv[1] is the
//     launch's resume options (JSON), argv[2] the state descriptor and
//     argv[3] the signal that woke the holder (or 0).
const (
	modeSupervise = "tent-supervisor"
	modeResume    = "tent-supervisor-resume"
)

// launch is what a supervisor is started with.
type launch struct {
	Store string       `json:"store"`
	ID    string       `json:"id"`
	Spec  sandbox.Spec `json:"spec"`
	// FromSnapshot, when set, forks the sandbox from the snapshot in
	// this directory (Spec is then ignored: the snapshot's, overridden,
	// is in it).
	FromSnapshot string `json:"from_snapshot,omitempty"`
	// Overrides apply to the snapshot's spec.
	Overrides *forkOverrides `json:"overrides,omitempty"`
	// Main makes a child supervisor (see child_linux.go): the command it
	// runs on StartMain and exits with.
	Main *mainCommand `json:"main,omitempty"`
	resumeOptions
	// main is Main's run, in the supervisor.
	main *mainRun
	// log is the supervisor's logger (the sandbox's log file).
	log *slog.Logger
	// service is the sandbox's service, started and ready (nil: none,
	// or not started yet: serve starts it).
	service sandbox.Process
}

// forkOverrides is sandbox.ForkOverrides in JSON.
type forkOverrides struct {
	Network  *sandbox.NetworkPolicy `json:"network,omitempty"`
	Limits   *sandbox.Limits        `json:"limits,omitempty"`
	Env      []string               `json:"env,omitempty"`
	Hostname string                 `json:"hostname,omitempty"`
	Name     string                 `json:"name,omitempty"`
	Labels   map[string]string      `json:"labels,omitempty"`
}

// resumeOptions are what a resumed supervisor needs besides the handed
// off state: they travel on its command line.
type resumeOptions struct {
	IdleAfter time.Duration `json:"idle_after,omitempty"`
	NetLog    string        `json:"net_log,omitempty"`
	Debug     bool          `json:"debug,omitempty"`
}

// resumeArgs is the command line the idle holder execs the supervisor
// with (it appends the state descriptor and the waking signal).
func (o launch) resumeArgs(st stateDir, id string) []string {
	if o.IdleAfter < 0 {
		return nil
	}
	b, _ := json.Marshal(struct {
		Store string `json:"store"`
		ID    string `json:"id"`
		resumeOptions
	}{st.Dir, id, o.resumeOptions})
	return []string{modeResume, string(b)}
}

// provisionOptions are the sandbox's: a logger on stderr (the sandbox's
// log file), the network audit log and the state directory's secret
// store.
func (o launch) provisionOptions(logTo io.Writer) (sandbox.ProvisionOptions, func(), error) {
	level := slog.LevelInfo
	if o.Debug {
		level = slog.LevelDebug
	}
	popts := sandbox.ProvisionOptions{
		Logger:    slog.New(slog.NewTextHandler(logTo, &slog.HandlerOptions{Level: level})),
		IdleAfter: o.IdleAfter, ID: o.ID,
		// The secrets' values: asked per request, never in this process's
		// launch, environment or memory beyond that request.
		Secrets: secretstore.Open(o.Store).Scoped(o.ID),
	}
	if o.NetLog == "" {
		return popts, func() {}, nil
	}
	f, err := os.OpenFile(o.NetLog, os.O_WRONLY|os.O_CREATE|os.O_APPEND|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return popts, nil, fmt.Errorf("the network log: %w", err)
	}
	popts.NetLog = f
	return popts, func() { f.Close() }, nil
}

// endSignals receives, in a supervisor, the signals that end supervision.
var endSignals chan os.Signal

func init() {
	reexec.Register(modeSupervise, superviseMain)
	reexec.Register(modeResume, resumeMain)
	if len(os.Args) > 0 && (os.Args[0] == modeSupervise || os.Args[0] == modeResume) {
		// The supervisor's goroutine must stay on the thread that started
		// the sandbox's init (the init dies with that thread; see
		// namespaces.ExecSupervisorHolder), and main runs on the thread
		// that ran the package inits when locked from one.
		runtime.LockOSThread()
		// Until a Go program asks for SIGTERM, the runtime dies of it,
		// which would kill the sandbox and leave its record behind; the
		// holder may have exec'd this process just before a SIGTERM.
		endSignals = make(chan os.Signal, 1)
		signal.Notify(endSignals, syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP)
	}
}

// untilSignal returns a context cancelled by the end signals; a SIGHUP
// goes to hangup instead when it is not nil (a child supervisor's
// terminal hung up: its main command gets it, as from a terminal).
func untilSignal(hangup func()) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(context.Background())
	go func() {
		for {
			select {
			case sig := <-endSignals:
				if sig == syscall.SIGHUP && hangup != nil {
					hangup()
					continue
				}
				cancel()
			case <-ctx.Done():
			}
			return
		}
	}()
	return ctx, cancel
}

func superviseMain() int {
	// Descriptors that the creator leaked to us (without close-on-exec)
	// go no further: not to the idle holder, not on.
	_ = unix.CloseRange(5, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	ready := os.NewFile(3, "ready")
	defer ready.Close()
	var o launch
	in := os.NewFile(4, "launch")
	defer in.Close()
	dec := json.NewDecoder(io.LimitReader(in, 16<<20))
	err := dec.Decode(&o)
	if err == nil && !validID(o.ID) {
		err = fmt.Errorf("%q is not a sandbox id", o.ID)
	}
	if err != nil {
		if _, werr := fmt.Fprintf(ready, "error 125 invalid reading the launch from fd 4: %v\n", err); werr != nil {
			// The creator died before it sent the launch (or while it
			// did): nobody will read the log, ours by the command line.
			if len(os.Args) == 3 && validID(os.Args[2]) {
				_ = os.Remove(logPath(stateDir{Dir: os.Args[1]}, os.Args[2]))
			}
		}
		return 1
	}
	fail := func(err error) int {
		if _, werr := fmt.Fprintf(ready, "error %d %s %s\n", sandbox.ExitCode(err), kindOf(err), err); werr != nil {
			// The creator is gone: nobody will read the log.
			_ = os.Remove(logPath(stateDir{Dir: o.Store}, o.ID))
		}
		return 1
	}
	var logTo io.Writer = os.Stderr
	if o.Main != nil {
		// A child supervisor: its stdio are the container's (see
		// child_linux.go), its log on fdChildLog; it stays awake for
		// the caller's parent, which may call at any time.
		logTo = os.NewFile(fdChildLog, "log")
		o.IdleAfter = -1
		o.main = newMainRun(*o.Main)
		signal.Ignore(syscall.SIGPIPE) // the container's stdio are not ours to write
	}
	popts, closeLog, err := o.provisionOptions(logTo)
	if err != nil {
		return fail(err)
	}
	o.log = popts.Logger
	if o.Main != nil {
		if o.Main.ParentReaps {
			popts.ParentReaps, popts.ExitStatus = true, o.main.initStatus
		}
		popts.ShareIPC, popts.Sysfs = o.Main.ShareIPC, o.Main.Sysfs
		if o.Main.PIDNSFD > 0 {
			pidNS := os.NewFile(uintptr(o.Main.PIDNSFD), "pod-pid-namespace")
			defer pidNS.Close()
			popts.PIDNamespace = pidNS
		}
	}
	joined, fail, err := o.joinCgroupsPath(fail)
	if err != nil {
		return fail(err)
	}
	defer closeLog()
	ctx, stop := untilSignal(o.main.hangupFunc())
	defer stop()
	ctx, creatorGone := context.WithCancel(ctx)
	defer creatorGone()
	var sb *sandbox.Sandbox
	if o.FromSnapshot != "" {
		snap, err := sandbox.LoadSnapshot(o.FromSnapshot)
		if err != nil {
			return fail(err)
		}
		if o.Overrides != nil {
			snap.Spec = sandbox.ForkOverrides(*o.Overrides).Apply(snap.Spec)
		}
		if intercepts(snap.Spec) {
			o.IdleAfter = -1 // the proxy's CA lives in this process only
		}
		if sb, err = sandbox.Fork(ctx, snap, popts); err != nil {
			return fail(err)
		}
	} else {
		if intercepts(o.Spec) {
			o.IdleAfter = -1
		}
		if sb, err = sandbox.Provision(ctx, o.Spec, popts); err != nil {
			return fail(err)
		}
	}
	st := stateDir{Dir: o.Store}
	spec := sb.Info().Spec
	rec := &record{recordHead: recordHead{ID: o.ID}, Name: spec.Name, Labels: spec.Labels, Created: time.Now().UTC(), CgroupParents: joined}
	err = superviseNew(ctx, st, rec, sb, o, func() {
		_, err := fmt.Fprintln(ready, "ok")
		if err == nil {
			err = awaitAck(ctx, io.MultiReader(dec.Buffered(), in))
		}
		if err != nil {
			popts.Logger.Debug("the creator is gone: ending the sandbox nobody knows of", "err", err)
			creatorGone()
		}
		ready.Close()
		in.Close()
	})
	if err != nil {
		return fail(err)
	}
	return o.main.exitCode()
}

// joinCgroupsPath moves a child supervisor into its launch's
// CgroupsPath before it makes the sandbox (see cgroups.JoinPath), and
// returns the directories made and fail, which then leaves and removes
// them too: nobody else would.
func (o launch) joinCgroupsPath(fail func(error) int) ([]string, func(error) int, error) {
	if o.Main == nil {
		return nil, fail, nil
	}
	joined, err := cgroups.JoinPath(o.Main.CgroupsPath)
	if err != nil || len(joined) == 0 {
		return nil, fail, err
	}
	return joined, func(err error) int {
		cgroups.LeaveJoined(joined)
		return fail(err)
	}, nil
}

// ackLine is what the creator writes back on the launch pipe once it has
// read "ok" (see acknowledge).
const ackLine = "ack\n"

// awaitAck waits for the creator's acknowledgement of "ok" on the launch
// pipe: its end closing first means it died before it read the id, or
// while it did. ctx ending (a signal) gives up.
func awaitAck(ctx context.Context, r io.Reader) error {
	got := make(chan error, 1)
	go func() {
		b, err := io.ReadAll(io.LimitReader(r, 64))
		switch {
		case strings.Contains(string(b), ackLine):
			got <- nil
		case err != nil:
			got <- err
		default:
			got <- errors.New("the launch pipe closed without an acknowledgement")
		}
	}()
	select {
	case err := <-got:
		return err
	case <-ctx.Done():
		return ctx.Err()
	}
}

func resumeMain() int {
	if len(os.Args) != 4 {
		fmt.Fprintln(os.Stderr, "tent: the supervisor's resume mode wants 3 arguments")
		return 2
	}
	var o launch
	if err := json.Unmarshal([]byte(os.Args[1]), &o); err != nil {
		fmt.Fprintln(os.Stderr, "tent: resuming a supervisor:", err)
		return 2
	}
	ctx, cancel := untilSignal(nil)
	defer cancel()
	if err := resume(ctx, o, os.Args[2], os.Args[3]); err != nil {
		fmt.Fprintln(os.Stderr, "tent:", err)
		return 1
	}
	return 0
}

// logPath is the sandbox's log file: its supervisor's stdout and stderr.
func logPath(st stateDir, id string) string {
	return strings.TrimSuffix(st.SocketPath(id), ".sock") + ".log"
}
