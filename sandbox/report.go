package sandbox

import (
	"encoding/json"
	"time"

	"github.com/tent-sandbox/tent/netpolicy"
)

// Status says how well a protection was provided.
type Status string

const (
	// Enforced: provided as asked.
	Enforced Status = "enforced"
	// Degraded: provided by a weaker mechanism (for example an rlimit
	// instead of a cgroup, or Landlock without scoping).
	Degraded Status = "degraded"
	// Absent: not provided — not requested, turned off, or unavailable
	// under best effort.
	Absent Status = "absent"
)

// Protection is one entry of a [Report].
type Protection struct {
	Name   string `json:"name"`
	Status Status `json:"status"`
	Detail string `json:"detail,omitempty"`
}

// Report describes one run: how it ended and which protections held.
type Report struct {
	ExitStatus int    `json:"exit_status"`
	Signal     string `json:"signal,omitempty"`
	SignalNum  int    `json:"signal_number,omitempty"`
	TimedOut   bool   `json:"timed_out"`
	// Tier is the tier that ran: TierFull or TierReduced.
	Tier      Tier `json:"tier"`
	OOMKilled bool `json:"oom_killed"`
	// WallTime runs from Start to the command's exit.
	WallTime time.Duration `json:"-"`
	// PeakMemory is the cgroup's peak memory use in bytes (0 when no
	// cgroup was used).
	PeakMemory    int64         `json:"peak_memory_bytes"`
	Timeout       time.Duration `json:"-"`
	MemoryLimit   int64         `json:"-"`
	LandlockABI   int           `json:"landlock_abi"`
	CgroupVersion string        `json:"cgroup_version"`
	// CgroupPaths are the sandbox's cgroup directories (removed with it).
	CgroupPaths []string     `json:"cgroup_paths,omitempty"`
	Protections []Protection `json:"protections"`
	// NetworkDenied lists the destinations the network policy refused
	// (limited mode), for a summary such as netpolicy.Summary.
	NetworkDenied []netpolicy.Denial `json:"network_denied,omitempty"`
}

// ExitCode is the conventional exit code of the run (see [ExitError]).
func (r *Report) ExitCode() int {
	switch {
	case r.TimedOut:
		return 124
	case r.SignalNum > 0:
		return 128 + r.SignalNum
	}
	return r.ExitStatus
}

// MarshalJSON adds wall time in seconds.
func (r *Report) MarshalJSON() ([]byte, error) {
	type plain Report
	return json.Marshal(struct {
		*plain
		ExitCode    int     `json:"exit_code"`
		WallSeconds float64 `json:"wall_time_seconds"`
	}{(*plain)(r), r.ExitCode(), r.WallTime.Seconds()})
}

func (r *Report) add(name string, s Status, detail string) {
	r.Protections = append(r.Protections, Protection{Name: name, Status: s, Detail: detail})
}

// Protection returns the named entry.
func (r *Report) Protection(name string) (Protection, bool) {
	for _, p := range r.Protections {
		if p.Name == name {
			return p, true
		}
	}
	return Protection{}, false
}
