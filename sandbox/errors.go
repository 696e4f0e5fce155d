package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox/internal/ref"
)

var (
	// ErrInvalidSpec wraps every error about a malformed spec: nothing was
	// created when it is returned.
	ErrInvalidSpec = errors.New("invalid sandbox spec")
	// ErrUnsupported means the host cannot provide a requested protection.
	ErrUnsupported = errors.New("unsupported on this host")
	// ErrCommandNotFound means the command does not exist inside the sandbox.
	ErrCommandNotFound = errors.New("command not found")
	// ErrNotExecutable means the command exists but cannot be executed.
	ErrNotExecutable = errors.New("command not executable")
	// ErrInitMissing means the program never called [Init].
	ErrInitMissing = namespaces.ErrInitMissing
	// ErrWorkDir means the working directory (Spec.Workdir,
	// ExecRequest.Dir) does not exist inside the sandbox or is not a
	// directory; the command did not start. It comes wrapped with
	// [ErrInvalidSpec] and the errno (ENOENT, ENOTDIR).
	ErrWorkDir = errors.New("unusable working directory")
	// ErrNotFound is returned for a reference (an id, a prefix, a name)
	// that names no sandbox or snapshot.
	ErrNotFound = ref.ErrNotFound
	// ErrAmbiguous is returned for a reference that matches several
	// sandboxes or snapshots.
	ErrAmbiguous = ref.ErrAmbiguous
	// ErrStopped is returned for a sandbox that has ended (its
	// Limits.Timeout, its init or its supervisor died) but not yet been
	// terminated: Resume or Terminate it.
	ErrStopped = errors.New("sandbox stopped")
)

// workDirError is the working directory that the init refused.
type workDirError struct {
	path  string
	errno syscall.Errno
}

func (e *workDirError) Error() string { return e.path + ": " + e.errno.Error() }
func (e *workDirError) Unwrap() error { return e.errno }

// invalid wraps err as an [ErrInvalidSpec].
func invalid(err error) error {
	if errors.Is(err, ErrInvalidSpec) {
		return err
	}
	if errors.Is(err, fs.ErrInvalidMount) {
		return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
	}
	return fmt.Errorf("%w: %w", ErrInvalidSpec, err)
}

// Missing is a protection the host cannot provide.
type Missing struct {
	Protection string `json:"protection"`
	Reason     string `json:"reason"`
	Fix        string `json:"fix"`
}

// UnsupportedError lists the protections the host cannot provide. It
// matches [ErrUnsupported] with errors.Is.
type UnsupportedError struct {
	Missing []Missing
	// Degradable is true when Spec.BestEffort would let the sandbox go
	// on without them (each then reported as degraded or absent); only
	// then does the message end with [BestEffortHint]. A refusal that
	// best effort cannot lift (a mount the host cannot idmap, a missing
	// user namespace where no reduced tier can stand in) gives the fixes
	// alone.
	Degradable bool
}

func (e *UnsupportedError) Error() string {
	var b strings.Builder
	b.WriteString("this host cannot enforce what the policy asks for:")
	for _, m := range e.Missing {
		fmt.Fprintf(&b, "\n  - %s: %s", m.Protection, m.Reason)
		if m.Fix != "" {
			fmt.Fprintf(&b, " (fix: %s)", m.Fix)
		}
	}
	if e.Degradable {
		b.WriteString("\n" + BestEffortHint)
	}
	return b.String()
}

// BestEffortHint ends a degradable [UnsupportedError]'s message; a frontend may
// replace it with its own spelling of Spec.BestEffort (the CLI's
// --best-effort).
const BestEffortHint = "set Spec.BestEffort to accept the degradation"

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// ExitError reports a command that did not exit 0: a status, a signal, a
// timeout, an out-of-memory kill, or the end of the Cmd's context (then
// it wraps ctx.Err(): errors.Is(err, context.DeadlineExceeded) holds).
type ExitError struct {
	Report *Report
	// Stderr holds the command's standard error (its first and last
	// 32 KiB) when [Cmd.Output] captured it, as exec.ExitError.Stderr.
	Stderr []byte
	// ctxErr is the context's error when the context killed the sandbox.
	ctxErr error
}

func (e *ExitError) Error() string {
	r := e.Report
	oom := ""
	if r.OOMKilled {
		oom = fmt.Sprintf(" (the OOM killer killed a process of its tree: memory limit %s)", cgroups.FormatSize(r.MemoryLimit))
	}
	switch {
	case e.ctxErr != nil:
		return "sandbox killed: " + e.ctxErr.Error()
	case r.TimedOut:
		return fmt.Sprintf("timed out after %s: process tree killed", r.Timeout)
	case r.OOMKilled && r.Signal == syscall.SIGKILL.String():
		return fmt.Sprintf("killed by the OOM killer: memory limit %s exceeded", cgroups.FormatSize(r.MemoryLimit))
	case r.Signal != "":
		return "killed by signal " + r.Signal + oom
	}
	return fmt.Sprintf("exit status %d", r.ExitCode) + oom
}

// Unwrap returns the context's error when the Cmd's context ended the
// sandbox, else nil.
func (e *ExitError) Unwrap() error { return e.ctxErr }

// ExitCode is the conventional exit code: the command's status, 128+N for
// death by signal N, 124 for a timeout.
func (e *ExitError) ExitCode() int { return e.Report.ExitCode }

// exitCodeForStart maps a failure to start the command to the CLI's
// conventions: 127 not found, 126 not executable, else 125.
func exitCodeForStart(err error) int {
	switch {
	case errors.Is(err, ErrCommandNotFound):
		return 127
	case errors.Is(err, ErrNotExecutable):
		return 126
	}
	return 125
}

// ExitCode maps any error from [Cmd.Run] or [Cmd.Wait] to the exit code
// the tent CLI uses: 0 for nil; the command's own code for an
// [*ExitError]; 127, 126 or 125 for failures to start.
func ExitCode(err error) int {
	if err == nil {
		return 0
	}
	// An *ExitError, or an error that crossed a process boundary with its
	// code (a supervisor's refusal).
	var ec interface{ ExitCode() int }
	if errors.As(err, &ec) {
		return ec.ExitCode()
	}
	return exitCodeForStart(err)
}

// startErrno classifies an exec failure's errno.
func startErrno(errno syscall.Errno) error {
	switch errno {
	case syscall.ENOENT:
		return ErrCommandNotFound
	case syscall.EACCES, syscall.ENOEXEC, syscall.EPERM, syscall.EISDIR:
		return ErrNotExecutable
	}
	return nil
}
