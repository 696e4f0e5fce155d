package sandbox

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"syscall"
	"time"
)

// Process is a command started in a sandbox by [Handle.Start], owned by
// the sandbox (its supervisor, for package supervised), not by the caller
// that started it: any caller finds it again by pid ([Handle.Process]),
// writes its stdin and reads its output, while it runs and for a while
// after (see [Handle.Processes]). Its output is kept in a bounded ring per
// stream (the last MiB of each): a reader asks from an offset and is told
// how much was dropped before it; a follower (Follow) holds the command
// back while it is slow, as a pipe does. Its methods are safe for concurrent use;
// a method's ctx bounds that call only, never the command.
type Process interface {
	// Pid is the command's pid inside the sandbox.
	Pid() int
	// Wait waits for the command to exit and returns its result (its
	// output is in the ring, not in the result). A command that ended
	// with its sandbox has no status of its own: Wait fails with
	// [ErrTerminated]. ctx's end stops the waiting, not the command.
	Wait(ctx context.Context) (*ExecResult, error)
	// Signal delivers sig to the command's foreground process group; a
	// command that has exited is [ErrNoProcess].
	Signal(ctx context.Context, sig syscall.Signal) error
	// Resize sets the size of the command's terminal (StartOptions's
	// terminal: ExecRequest.TTY); one without fails.
	Resize(ctx context.Context, sz WindowSize) error
	// WriteStdin queues p for the command's stdin (StartOptions.Stdin)
	// and returns without waiting for the command to read it; writes
	// reach the command in order. A write that would leave more than
	// 1 MiB unread (maxStdinPending) fails whole with [ErrStdinFull], at
	// once (package supervised sends a write of more than 64 KiB in
	// pieces, each taken or refused whole). A command that has exited is
	// [ErrNoProcess].
	WriteStdin(ctx context.Context, p []byte) error
	// CloseStdin ends the command's stdin: it reads end of file once it
	// has read what was written before.
	CloseStdin(ctx context.Context) error
	// ReadOutput returns the output of stream fd (1 stdout, 2 stderr; a
	// terminal's is all on 1) from offset off (bytes since the command
	// started), waiting until there is some past off or the stream has
	// ended. A ctx that has already ended asks for no wait: what is there
	// now, or, with nothing past off, ctx's error at once. It does not
	// consume: another reader may read it again, as long as the ring
	// keeps it.
	ReadOutput(ctx context.Context, fd int, off int64) (Output, error)
	// Follow writes stream fd (as ReadOutput) from offset off to w, as
	// it comes, until the stream ends, and returns the offset it reached
	// (off plus what w took). It reads as an attached reader, as a pipe
	// does: while w is slow, a command that writes more than the ring
	// keeps waits for it, and nothing is dropped; it consumes nothing
	// (ReadOutput and other readers read the same output). A nil error
	// means all the output was written. When the ring no longer keeps
	// the output at off, Follow writes nothing and fails with
	// [ErrOutputDropped], returning the oldest offset kept (the gap is
	// the difference): follow again from there. An offset past what the
	// command wrote is [ErrInvalidSpec]. It returns as well when ctx
	// ends (with ctx.Err(); the command goes on, and once nobody follows
	// it, its output drops again as it overflows) or w fails (w's
	// error); a write to w in progress is not cut short by ctx.
	Follow(ctx context.Context, fd int, off int64, w io.Writer) (end int64, err error)
}

// Output is a piece of a [Process]'s output stream.
type Output struct {
	// Data starts at Offset: at the offset asked for, or later when the
	// ring dropped the bytes between (Dropped of them).
	Data    []byte `json:"data,omitempty"`
	Offset  int64  `json:"offset"`
	Dropped int64  `json:"dropped,omitempty"`
	// End: the stream has ended, and Data reaches its end.
	End bool `json:"end,omitempty"`
}

// StartOptions are a [Process]'s own settings, beside its [ExecRequest].
type StartOptions struct {
	// Tag names the command for whoever lists it (E2B's process tag);
	// two running commands of one sandbox cannot share one.
	Tag string
	// Stdin keeps the command's stdin open for [Process.WriteStdin]
	// until [Process.CloseStdin]; without it, it reads /dev/null.
	Stdin bool
}

// ProcessInfo describes a [Process] (see [Handle.Processes]).
type ProcessInfo struct {
	// Pid is the command's pid inside the sandbox.
	Pid  int      `json:"pid"`
	Args []string `json:"args"`
	// Dir is the working directory it was started in ("": the
	// sandbox's), Tag the caller's name for it (StartOptions).
	Dir     string    `json:"dir,omitempty"`
	Tag     string    `json:"tag,omitempty"`
	Started time.Time `json:"started"`
	// Stdin: its stdin is open for writes; TTY: it runs on a terminal;
	// Exec: it was started by an Exec, which waits for it (its stdio is
	// its caller's, and its record goes when it ends).
	Stdin bool `json:"stdin,omitempty"`
	TTY   bool `json:"tty,omitempty"`
	Exec  bool `json:"exec,omitempty"`
	// Running is true until the command has exited; then Ended, Exit
	// and Signal say how. A running command has no exit status: its
	// JSON has no "exit" (as no "ended" and no "signal"), and Exit is 0.
	Running bool       `json:"running"`
	Ended   *time.Time `json:"ended,omitempty"`
	Exit    int        `json:"exit"`
	Signal  string     `json:"signal,omitempty"`
	// Unread is how many bytes of output no reader took yet (from
	// Taken on: what the next tent attach gets, at most the ring's bound
	// of each stream); Dropped how many were dropped before any reader
	// took them.
	Unread  int64 `json:"unread"`
	Dropped int64 `json:"dropped,omitempty"`
	// Taken is, for stdout and stderr, the furthest offset any
	// follower (Follow, as tent attach follows) got to: a client that
	// comes later and wants only what no reader took follows on from
	// there.
	Taken [2]int64 `json:"taken,omitzero"`
}

// MarshalJSON writes p with "exit" only once the command has exited: a
// running command has no exit status (a 0 would read as success).
func (p ProcessInfo) MarshalJSON() ([]byte, error) {
	type plain ProcessInfo // without this method
	v := struct {
		plain
		Exit *int `json:"exit,omitempty"`
	}{plain: plain(p)}
	if !p.Running {
		v.Exit = &p.Exit
	}
	return json.Marshal(v)
}

// ErrNoProcess is returned for a pid that names no [Process] of the
// sandbox, or one that has already exited where a running one is needed
// (a signal, a write to its stdin).
var ErrNoProcess = errors.New("no such process")

// maxStdinPending bounds the input a [Process] has not read yet: a
// [Process.WriteStdin] that would make more than this many bytes wait, in
// the sandbox's queue and in the command's pipe, fails with
// [ErrStdinFull].
const maxStdinPending = 1 << 20

// ErrStdinFull is returned by [Process.WriteStdin] when the command has
// not read 1 MiB of its input: it is not reading it. The
// write is refused whole; write again once it has read.
var ErrStdinFull = errors.New("stdin full")

// ErrOutputDropped is returned by [Process.Follow] when the output at the
// offset asked for was dropped from the ring (nobody followed it as it
// overflowed); the offset returned with it is the oldest kept.
var ErrOutputDropped = errors.New("output dropped")

const (
	// maxProcesses is how many processes a sandbox keeps records of,
	// running and finished.
	maxProcesses = 64
	// maxProcessOutput is how much of each output stream of a process is
	// kept for the next reader; older output is dropped (and counted).
	maxProcessOutput = 1 << 20
	// processKeep is how long a finished process's record is kept.
	processKeep = time.Hour
	// maxOutputRead bounds one ReadOutput's data: it crosses a
	// SOCK_SEQPACKET socket in one message, which the socket's send
	// buffer bounds (208 KiB by default), in base64.
	maxOutputRead = 64 << 10
)
