package sandbox

import (
	"errors"
	"fmt"
	"strings"
	"syscall"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
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
)

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
	b.WriteString("\nrun with best effort (--best-effort) to accept the degradation")
	return b.String()
}

// Is makes errors.Is(err, ErrUnsupported) true.
func (e *UnsupportedError) Is(target error) bool { return target == ErrUnsupported }

// ExitError reports a command that did not exit 0: a status, a signal, a
// timeout or an out-of-memory kill.
type ExitError struct {
	Report *Report
}

func (e *ExitError) Error() string {
	r := e.Report
	switch {
	case r.TimedOut:
		return fmt.Sprintf("timed out after %s: process tree killed", r.Timeout)
	case r.OOMKilled:
		return fmt.Sprintf("killed by the OOM killer: memory limit %s exceeded", FormatSize(r.MemoryLimit))
	case r.Signal != "":
		return "killed by signal " + r.Signal
	}
	return fmt.Sprintf("exit status %d", r.ExitStatus)
}

// ExitCode is the conventional exit code: the command's status, 128+N for
// death by signal N, 124 for a timeout.
func (e *ExitError) ExitCode() int { return e.Report.ExitCode() }

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
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	var re *RemoteError
	if errors.As(err, &re) && re.Code != 0 {
		return re.Code
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
