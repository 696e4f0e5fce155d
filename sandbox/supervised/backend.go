package supervised

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"
)

// Name is the [Backend]'s [sandbox.Backend.Name].
const Name = "supervised"

// Options configure a [Backend].
type Options struct {
	// Logger receives the backend's debug logs; when it logs at debug
	// level, supervisors log at debug level to their sandbox's log file
	// too. Nil discards them.
	Logger *slog.Logger
	// IdleAfter is how long a supervisor waits with no request, no
	// command running and no proxied connection open before it and the
	// sandbox's init give way to small idle holders: 0 means
	// sandbox.DefaultIdleAfter, a negative value never.
	IdleAfter time.Duration
	// NetLog, when not "", is a file every sandbox's network decisions
	// are appended to (limited mode), as JSON lines.
	NetLog string
}

// DefaultStateDir is $TENT_STATE_DIR, else /var/lib/tent for root, else
// $XDG_STATE_HOME/tent, else ~/.local/state/tent.
func DefaultStateDir() string {
	if d := os.Getenv("TENT_STATE_DIR"); d != "" {
		return d
	}
	if os.Geteuid() == 0 {
		return "/var/lib/tent"
	}
	if d := os.Getenv("XDG_STATE_HOME"); d != "" {
		return filepath.Join(d, "tent")
	}
	home, _ := os.UserHomeDir()
	return filepath.Join(home, ".local", "state", "tent")
}

// ErrUnsafeStateDir is returned for a state directory that someone other
// than the caller owns or may write.
var ErrUnsafeStateDir = errors.New("unsafe state directory")

// RecordError is a sandbox whose record in the state directory cannot be
// read: a file cut short or empty (a full disk, a crash of something that
// wrote it by hand), garbage, a record that names another sandbox, or an
// ID.json that is not a regular file (a symlink, which is never followed,
// a directory). One broken record stops nothing else:
//
//   - [Backend.List] (the [sandbox.Backend] verb) leaves it out, as it
//     cannot describe it; [Backend.ListAll] returns the readable
//     sandboxes and, beside them, one *RecordError per broken record;
//   - [Backend.Lookup] of its id (or of a prefix only it matches) fails
//     with it, and so does every verb of its handle but Terminate; names
//     resolve among the readable records (a broken record's name is
//     unknown);
//   - [Backend.Sandbox] (and Open) of its exact id returns a handle whose
//     Terminate removes it: the record and the supervisor's files, and
//     the sandbox itself when its supervisor still runs (found through
//     its control socket beside the record, asked to remove the sandbox,
//     and killed if it does not answer);
//   - a live supervisor writes its record again when it next saves it (a
//     network or mount change, a suspend) or wakes from idling.
//
// Match it with errors.As.
type RecordError struct {
	// ID is the sandbox's id, from the record's file name.
	ID string
	// Path is the record's file, ID.json in the state directory.
	Path string
	// Err says what is wrong with it.
	Err error
}

func (e *RecordError) Error() string {
	return fmt.Sprintf("sandbox %s: broken state record %s: %v (tent rm %s removes it)", e.ID, e.Path, e.Err, e.ID)
}

// Unwrap returns Err.
func (e *RecordError) Unwrap() error { return e.Err }
