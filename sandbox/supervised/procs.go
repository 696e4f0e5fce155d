package supervised

import (
	"encoding/json"
	"errors"
	"time"
)

const (
	// MaxDetached is how many detached commands a sandbox keeps records
	// of, running and finished.
	MaxDetached = 64
	// MaxDetachedOutput is how much of a detached command's output is
	// kept for the next reader; older output is dropped (and counted).
	MaxDetachedOutput = 1 << 20
	// detachedKeep is how long a finished command's record is kept.
	detachedKeep = time.Hour
)

// ProcessInfo describes a detached command (see [Sandbox.ExecDetached]).
type ProcessInfo struct {
	// Pid is the command's pid inside the sandbox.
	Pid  int      `json:"pid"`
	Args []string `json:"args"`
	// Dir is the working directory it was started in ("": the
	// sandbox's), Tag the caller's name for it (DetachOptions).
	Dir     string    `json:"dir,omitempty"`
	Tag     string    `json:"tag,omitempty"`
	Started time.Time `json:"started"`
	// Running is true until the command has exited; then Ended, Exit
	// and Signal say how. A running command has no exit status: its
	// JSON has no "exit" (as no "ended" and no "signal"), and Exit is 0.
	Running bool       `json:"running"`
	Ended   *time.Time `json:"ended,omitempty"`
	Exit    int        `json:"exit"`
	Signal  string     `json:"signal,omitempty"`
	// Unread is how many bytes of output the next attach gets (at most
	// MaxDetachedOutput of each stream); Dropped how many were dropped
	// unread.
	Unread  int64 `json:"unread"`
	Dropped int64 `json:"dropped,omitempty"`
}

// DetachOptions are a detached command's own settings.
type DetachOptions struct {
	// Tag names the command for whoever lists it (E2B's process tag);
	// two running commands of one sandbox cannot share one.
	Tag string
}

// ErrNoProcess is returned for a pid that names no detached command of
// the sandbox, or one that has already exited where a running one is
// needed (a signal).
var ErrNoProcess = errors.New("no such detached command")

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
