package supervised

import (
	"errors"
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
