package sandbox

import (
	"errors"
	"io"
	"log/slog"
	"os"
	"time"

	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
)

var (
	// ErrTerminated is returned by the methods of a terminated [Sandbox].
	ErrTerminated = errors.New("sandbox terminated")
	// ErrSuspended is returned by Exec on a suspended [Sandbox].
	ErrSuspended = errors.New("sandbox suspended")
)

// ProvisionOptions are the host-side settings of a long-lived sandbox.
type ProvisionOptions struct {
	// Logger receives debug logs; nil discards them.
	Logger *slog.Logger
	// NetLog receives the network audit log in limited mode.
	NetLog io.Writer
	// ID names the sandbox in the network audit log's records (their
	// "sandbox" field); "" means a random one. tent create uses the
	// sandbox's id.
	ID string
	// ProxyLimits bound what the sandbox can make its network proxy
	// spend in limited mode; the zero value is the defaults.
	ProxyLimits ProxyLimits
	// Resolver resolves the names the network policy allows; nil means
	// the host's resolver.
	Resolver netpolicy.Resolver
	// IdleAfter is how long the sandbox may sit with no request and no
	// command running before its init, a Go process of several MiB, gives
	// way to a small idle holder (under 1 MiB resident) that brings the
	// init back at the next request: that request then pays the Go
	// runtime's start-up, about 10 ms on a 2-vCPU VM. 0 means
	// [DefaultIdleAfter]; a negative value keeps the init for good (it
	// still trims its memory after a few idle seconds). Binaries built
	// without cgo have no holder.
	IdleAfter time.Duration
	// Secrets gives the values of the network policy's secrets, asked
	// each time a request to one of their hosts goes out, so that a write
	// to it rotates or revokes a credential (see netpolicy.SecretSource).
	// Values of variables given inline (netpolicy.Secret.Value) are
	// written to it when it has a method Set(name, value string) error,
	// and refused when it has none; a header transform's value stays the
	// sandbox's own, in its memory. nil keeps the inline values in the sandbox's memory: then
	// every secret must have one.
	Secrets netpolicy.SecretSource
	// ParentReaps makes the sandbox's init a child of this process's
	// parent rather than of this process (CLONE_PARENT): for a program
	// that exits once the sandbox is made and leaves it to a parent that
	// learns a container's end by reaping one pid (tent-runc's
	// supervisor, under containerd's shim). That pid is then the init,
	// in the sandbox's namespaces and cgroup, as runc's container
	// process is; when the sandbox ends, the init exits with
	// ExitStatus() (nil: 128+SIGKILL), after the kernel has killed every
	// other process of the sandbox. The init is never handed to an idle
	// holder (IdleAfter is then taken as negative).
	ParentReaps bool
	// ExitStatus gives the init's exit status (0-255) when the sandbox
	// ends, with ParentReaps.
	ExitStatus func() int
	// ShareIPC keeps the sandbox in this process's IPC namespace instead
	// of a new one: for a caller that joined a pod's (tent-runc's
	// supervisor, whose containers of one pod share the pod's System V
	// IPC and POSIX message queues). The namespace's sysctls are its
	// owner's to set: IPC sysctls in the spec are then refused.
	ShareIPC bool
	// PIDNamespace, when not nil, is a pid namespace (a pod's, for
	// Kubernetes' shareProcessNamespace) the sandbox's init is cloned
	// into instead of a new one: its processes then see, and are seen
	// by, the namespace's others. The init is not PID 1 there: when it
	// ends, what is left of the sandbox's processes is killed through its
	// cgroup, so a sandbox without one (no cgroup) is refused. The procfs
	// of that namespace is made on the host (namespaces.Options). Root
	// only (a caller without CAP_SYS_ADMIN gets ErrUnsupported), and
	// only where Landlock scopes signals (ABI 6, Linux 6.12): nothing else
	// keeps the commands from stopping an init that is not PID 1. An idle
	// init's holder (IdleAfter) is a child subreaper there too. The
	// caller keeps and closes it.
	PIDNamespace *os.File
	// Sysfs gives the sandbox a read-only sysfs at /sys, as runc gives a
	// container: that of its network namespace (its own, a pod's or the
	// host's), made on the host (a sysfs shows the devices of the
	// network namespace it was made in, and the sandbox's user namespace
	// may not make one for a namespace it does not own), nosuid, nodev,
	// noexec, with the spec's masked paths over it and the cgroup view
	// at /sys/fs/cgroup. With a root of the caller's, only where it has
	// /sys. Root only: for another caller it is left out (no /sys, as
	// without it). tent-runc sets it; tent's own sandboxes have no /sys
	// but their cgroup view.
	Sysfs bool
}

// DefaultIdleAfter is the default [ProvisionOptions.IdleAfter].
const DefaultIdleAfter = namespaces.DefaultIdleAfter

// ExecRequest is one command to run in a [Sandbox].
type ExecRequest struct {
	// Args is the command and its arguments; Args[0] is looked up in PATH
	// inside the sandbox unless it contains a slash.
	Args []string
	// Dir is the working directory inside; "" means the sandbox's.
	Dir string
	// Env is layered over the sandbox's environment, later wins.
	Env []string
	// Stdin is the command's fd 0: an *os.File is passed as is, another
	// reader is copied through a pipe; nil means /dev/null.
	Stdin io.Reader
	// Stdout and Stderr are the command's fds 1 and 2, streamed as the
	// command writes (never buffered until it exits):
	//
	//   - nil: captured into ExecResult.Stdout or ExecResult.Stderr, up
	//     to MaxOutput bytes (DefaultMaxOutput when MaxOutput is 0);
	//   - [io.Discard]: /dev/null, nothing is copied;
	//   - an *os.File: passed as is, with no copy, unless MaxOutput is
	//     positive (the output is then counted through a pipe, so the
	//     command no longer sees a terminal);
	//   - another writer: copied through a pipe as the command writes.
	//
	// When Stdout and Stderr are the same writer, fds 1 and 2 share one
	// pipe, as with os/exec: the order of the command's writes is kept,
	// the writer is never called concurrently, MaxOutput caps the
	// combined stream and both truncation flags report it. A writer that
	// fails is dropped and the rest of its output discarded. Output that
	// a background process writes after the command exited is cut off
	// after a short grace.
	//
	// A file the sandbox's user could not reopen by path (/dev/stdout,
	// /proc/self/fd/N), such as a root caller's pipe or a socket, is
	// relayed through a pipe that user owns (see "How the command's
	// stdio can be reopened" in the package doc).
	Stdout, Stderr io.Writer
	// TTY, when set, runs the command on a new terminal inside the
	// sandbox (see [Terminal]): Stdin is copied into it, its output goes
	// to Stdout under the rules above (nil: captured), Stderr is unused.
	TTY *Terminal
	// Signals, when not nil, is read while the command runs: each
	// syscall.Signal received is delivered to the command's foreground
	// process group, as [Cmd.Signal] does.
	Signals <-chan os.Signal
	// Timeout, when positive, kills the command (and its process group)
	// after that long; the result says TimedOut.
	Timeout time.Duration
	// MaxOutput caps each of stdout and stderr, in bytes. Past the cap
	// the rest is read and dropped — the command never blocks on a full
	// pipe and keeps running — and ExecResult.StdoutTruncated or
	// StderrTruncated is set. 0 means DefaultMaxOutput for captured
	// output (a nil Stdout or Stderr) and no cap for the caller's own
	// writers and files; a negative value is refused (ErrInvalidSpec).
	MaxOutput int64
	// AsRoot runs the command as root inside the sandbox — never as host
	// root — for callers whose users expect a root account (E2B's
	// user: "root"): uid and gid 0 of a user namespace nested in the
	// sandbox's, whose one mapped id is the sandbox's user, as `unshare
	// -r` makes them. The command is root in its own view (id -u is 0, the
	// sandbox user's files are its own, others' show as nobody) and can
	// do nothing the sandbox's user cannot: it holds no capability, and
	// no_new_privs, Landlock, seccomp, the cgroup and the rlimits apply as
	// to any command. It needs the sandbox's own user namespace (the full
	// tier; [ErrUnsupported] otherwise). Env and Dir are not changed:
	// set HOME and the like as root should see them.
	AsRoot bool
	// User, when set, runs the command as this user of the sandbox (UID,
	// GID, Groups; Name is not used) rather than the sandbox's
	// ([Identity].User): another user of an image, as `docker exec
	// --user` does. Ids other than the sandbox user's need
	// [Identity].IDRange, within it ([ErrInvalidSpec] otherwise). Not
	// with AsRoot.
	User *User
	// Capabilities and AmbientCapabilities, when not nil, are the
	// command's instead of the sandbox's ([Identity].Capabilities;
	// empty: none).
	Capabilities, AmbientCapabilities []string
}

// ExecResult is how a command ended, and its captured output.
type ExecResult struct {
	// Exit is how it ended. OOMKilled is set when the count of OOM kills
	// in the sandbox's cgroup rose while the command ran (and it was not
	// killed for ctx): the memory limit killed the command or one of its
	// descendants — give or take a concurrent exec's process killed at
	// the same moment.
	Exit
	Duration time.Duration `json:"duration_ns"`
	// Stdout and Stderr are the captured output when the request's
	// Stdout or Stderr was nil (at most MaxOutput bytes each); nil when
	// it was streamed to a writer or file. Encoded in base64 in JSON.
	Stdout []byte `json:"stdout,omitempty"`
	Stderr []byte `json:"stderr,omitempty"`
	// StdoutTruncated and StderrTruncated report that the command wrote
	// more than MaxOutput bytes to that stream and the rest was dropped.
	StdoutTruncated bool `json:"stdout_truncated"`
	StderrTruncated bool `json:"stderr_truncated"`
	// NetworkDenied lists the connections the network policy refused
	// while the command ran (limited mode; give or take a concurrent
	// command's), for a summary such as netpolicy.Summary.
	NetworkDenied []netpolicy.Denial `json:"network_denied,omitempty"`
}

// DefaultMaxOutput is the cap, in bytes, on each captured output stream
// of an exec (ExecRequest.Stdout or Stderr nil) when
// ExecRequest.MaxOutput is 0: 1 MiB, more than an agent's context takes
// in and little enough for many concurrent execs.
const DefaultMaxOutput = 1 << 20
