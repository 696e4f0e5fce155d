package supervised

import (
	"errors"
	"os"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// A supervisor serves a SOCK_SEQPACKET control socket in the state
// directory (ID.sock), one request per connection. A request is one JSON
// message (ctlmsg), with descriptors attached (SCM_RIGHTS) for the
// operations that stream: an exec's stdin, stdout and stderr, a file
// operation's input, output and error, a follow's pipe. The answer is one reply; an exec
// is a session (see session_linux.go). Only the sandbox's owner (or
// root), from outside every sandbox, may connect (see checkPeer).

// Operations (request.Op).
const (
	opExec     = "exec"     // a session: see session_linux.go
	opFile     = "file"     // the file helper, File = the request
	opNet      = "net"      // replace the network policy
	opMount    = "mount"    // add a mount
	opLimits   = "limits"   // change Limits (SetLimits)
	opSnapshot = "snapshot" // snapshot into the state directory
	opSuspend  = "suspend"
	opResume   = "resume"
	opRemove   = "rm"   // terminate; answered before the teardown
	opStop     = "stop" // end the sandbox but keep it, stopped; answered before the teardown
	// Detached commands: sandbox.Process (see procs_linux.go). The
	// requests that wait end when the caller closes its end.
	opStart      = "start"       // start a command detached (Stdin, TTY): its pid in reply.Pid
	opPs         = "ps"          // reply.Procs
	opProc       = "proc"        // is Pid a detached command (ErrNoProcess)?
	opSignal     = "signal"      // Signal to detached command Pid
	opResize     = "resize"      // resize Pid's terminal to TTY
	opStdin      = "stdin"       // write Data to Pid's stdin
	opCloseStdin = "close-stdin" // close Pid's stdin
	opOutput     = "output"      // reply.Output: Pid's output Stream from Offset
	opWait       = "wait"        // reply.Result: Pid's, once it has exited
	// opFollow writes Pid's output Stream from Offset to the caller's
	// descriptor (a pipe) until the stream ends; reply.Output's Offset is
	// where it stopped, with Dropped (and nothing written) when the ring
	// no longer kept Offset. The supervisor's writes wait on the pipe:
	// a slow caller holds the command back.
	opFollow = "follow"
	// opDial connects to Port of the sandbox's loopback; the reply
	// carries the connection's descriptor.
	opDial = "dial"
	// opPublish publishes Publish on the host (reply.Published: as bound).
	opPublish = "publish"
	// The file verbs (see files_linux.go), their arguments in Files:
	// the supervisor calls the core's verb and answers typed. opReadFile
	// passes the pipe to write the content to, and answers Size before
	// it writes; opWriteFile passes the content; opWatch answers once
	// the watch is in place, then once per Event, until the caller
	// closes its end. opFile (File) runs the raw archive streams.
	opReadFile   = "read-file"   // reply.Size, then the answer
	opWriteFile  = "write-file"  // reply.Info
	opStat       = "stat"        // reply.Info
	opReadDir    = "read-dir"    // reply.Infos
	opMkdir      = "mkdir"       // reply.Info
	opRename     = "rename"      // reply.Info
	opRemoveFile = "remove-file" // Files.All: the tree
	opWatch      = "watch"       // reply.Event, one per answer
	// The main command of a child supervisor (see child_linux.go).
	opMainStart  = "main-start"  // start it
	opMainSignal = "main-signal" // Signal to it
	opMainState  = "main-state"  // reply.Main: its MainState
)

// request is one request to a supervisor.
type request struct {
	Op      string               `json:"op"`
	Args    []string             `json:"args,omitempty"`
	File    *sandbox.FileRequest `json:"file,omitempty"`
	Files   *fileArgs            `json:"files,omitempty"`
	Env     []string             `json:"env,omitempty"`
	Dir     string               `json:"dir,omitempty"`
	Timeout time.Duration        `json:"timeout_ns,omitempty"`
	// MaxOutput caps each output stream (see ExecRequest.MaxOutput).
	MaxOutput int64 `json:"max_output,omitempty"`
	// AsRoot runs the command as root inside (ExecRequest.AsRoot).
	AsRoot bool `json:"as_root,omitempty"`
	// User runs the command as another user (ExecRequest.User).
	User    *sandbox.User          `json:"user,omitempty"`
	Network *sandbox.NetworkPolicy `json:"network,omitempty"`
	Mount   *sandbox.Mount         `json:"mount,omitempty"`
	Limits  *sandbox.Limits        `json:"limits,omitempty"`
	// IncludeReadWrite asks a snapshot to archive the rw mounts too.
	IncludeReadWrite bool `json:"include_rw,omitempty"`
	// Pid and Signal name a detached command and a signal for it.
	Pid    int `json:"pid,omitempty"`
	Signal int `json:"signal,omitempty"`
	// Port is a dial's TCP port inside.
	Port int `json:"port,omitempty"`
	// Tag names a detached command (start), for its readers; Stdin keeps
	// its stdin open for writes; TTY is its terminal's size (start,
	// resize).
	Tag   string              `json:"tag,omitempty"`
	Stdin bool                `json:"stdin,omitempty"`
	TTY   *sandbox.WindowSize `json:"tty,omitempty"`
	// Data is what to write to a detached command's stdin (at most
	// maxStdinWrite bytes); Stream and Offset where to read its output.
	// NoWait (output) answers with what is there now, nothing included.
	Data   []byte `json:"data,omitempty"`
	Stream int    `json:"stream,omitempty"`
	Offset int64  `json:"offset,omitempty"`
	NoWait bool   `json:"no_wait,omitempty"`
	// Publish is a port to publish.
	Publish *sandbox.PortMapping `json:"publish,omitempty"`
}

// fileArgs are a file verb's arguments.
type fileArgs struct {
	Path  string               `json:"path"`
	To    string               `json:"to,omitempty"`
	Depth int                  `json:"depth,omitempty"`
	All   bool                 `json:"all,omitempty"`
	Read  sandbox.ReadOptions  `json:"read,omitzero"`
	Write sandbox.WriteOptions `json:"write,omitzero"`
	Watch sandbox.WatchOptions `json:"watch,omitzero"`
}

// reply is a supervisor's answer. A failure has Error, its Kind (the
// sentinel errors it matched, see kinds, comma-separated) and Code,
// tent's exit code for it.
type reply struct {
	Error string `json:"error,omitempty"`
	Kind  string `json:"kind,omitempty"`
	Code  int    `json:"code,omitempty"`
	// Errno is the errno the failure carried, if any (a file operation's),
	// and PathOp, Path and PathErr its *os.PathError's fields, if it was
	// one (PathErr: its Err's message).
	Errno   int    `json:"errno,omitempty"`
	PathOp  string `json:"path_op,omitempty"`
	Path    string `json:"path,omitempty"`
	PathErr string `json:"path_err,omitempty"`
	// The file verbs' answers.
	Info   *sandbox.FileInfo   `json:"info,omitempty"`
	Infos  []sandbox.FileInfo  `json:"infos,omitempty"`
	Size   *int64              `json:"size,omitempty"`
	Event  *sandbox.WatchEvent `json:"event,omitempty"`
	Result *sandbox.ExecResult `json:"result,omitempty"`
	// Snapshot is the id of a snapshot just taken.
	Snapshot string `json:"snapshot,omitempty"`
	// Pid is a detached command's, Procs the detached commands.
	Pid   int           `json:"pid,omitempty"`
	Procs []ProcessInfo `json:"procs,omitempty"`
	// Output is a piece of a detached command's output.
	Output *sandbox.Output `json:"output,omitempty"`
	// Published is a port just published, with its host port bound.
	Published *sandbox.PortMapping `json:"published,omitempty"`
	// Main is a child supervisor's main command's MainState.
	Main string `json:"main,omitempty"`
}

// kinds are the sentinel errors that cross the socket, so that
// errors.Is(err, sandbox.ErrNotFound) holds on both sides.
var kinds = []struct {
	name string
	err  error
}{
	{"invalid", sandbox.ErrInvalidSpec},
	{"unsupported", sandbox.ErrUnsupported},
	{"not-found", sandbox.ErrNotFound},
	{"ambiguous", sandbox.ErrAmbiguous},
	{"terminated", sandbox.ErrTerminated},
	{"stopped", sandbox.ErrStopped},
	{"command-not-found", sandbox.ErrCommandNotFound},
	{"not-executable", sandbox.ErrNotExecutable},
	{"snapshot-corrupt", sandbox.ErrSnapshotCorrupt},
	{"init-missing", sandbox.ErrInitMissing},
	{"workdir", sandbox.ErrWorkDir},
	{"suspended", sandbox.ErrSuspended},
	{"no-process", ErrNoProcess},
	{"stdin-full", sandbox.ErrStdinFull},
	{"service-not-ready", ErrServiceNotReady},
}

// kindOf names the sentinels err matches, comma-separated ("other" for
// none).
func kindOf(err error) string {
	var names []string
	for _, k := range kinds {
		if errors.Is(err, k.err) {
			names = append(names, k.name)
		}
	}
	if len(names) == 0 {
		return "other"
	}
	return strings.Join(names, ",")
}

// failure is the reply for err.
func failure(err error) reply {
	r := reply{Error: err.Error(), Kind: kindOf(err), Code: sandbox.ExitCode(err)}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		r.Errno = int(errno)
	}
	var pe *os.PathError
	if errors.As(err, &pe) {
		r.PathOp, r.Path, r.PathErr = pe.Op, pe.Path, pe.Err.Error()
	}
	return r
}

// Error is a supervisor's refusal: its message, matching the sentinel
// error it was made from (errors.Is), with tent's exit code for it.
type Error struct {
	Msg  string
	Code int
	// Errno is the errno the refusal carried (0: none).
	Errno syscall.Errno
	kinds []error
}

func (e *Error) Error() string { return e.Msg }

// Is reports whether the refusal was made from target.
func (e *Error) Is(target error) bool { return slices.Contains(e.kinds, target) }

// Unwrap returns the errno, if any (errors.Is(err, fs.ErrNotExist) works).
func (e *Error) Unwrap() error {
	if e.Errno == 0 {
		return nil
	}
	return e.Errno
}

// ExitCode is tent's exit code for the refusal.
func (e *Error) ExitCode() int { return e.Code }

// remoteError is the error a failed reply stands for.
func remoteError(r reply) error {
	e := &Error{Msg: r.Error, Code: r.Code, Errno: syscall.Errno(r.Errno)}
	for _, name := range strings.Split(r.Kind, ",") {
		for _, k := range kinds {
			if k.name == name {
				e.kinds = append(e.kinds, k.err)
			}
		}
	}
	if e.Code == 0 {
		e.Code = 125
	}
	if strings.Contains(r.Error, olderSupervisor) {
		// A supervisor started by an older tent does not know a verb
		// this one sends: say how to bring the sandbox to this version.
		e.Msg += " (the sandbox's supervisor was started by an older tent: stop it and resume it to run it under this one)"
	}
	return e
}

// olderSupervisor is what a supervisor answers to an operation it does
// not know (see serve's default case).
const olderSupervisor = "unknown operation"

// aLongTimeAgo is a deadline in the past, which wakes a blocked read.
var aLongTimeAgo = time.Unix(1, 0)
