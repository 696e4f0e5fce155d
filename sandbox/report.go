package sandbox

import (
	"encoding/json"
	"syscall"
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

// Exit is how a command ended. A run's [Report] and an exec's
// [ExecResult] share it.
type Exit struct {
	// ExitCode follows the shell's conventions: the command's exit
	// status, 128+N for death by signal N, 124 for a timeout.
	ExitCode int `json:"exit_code"`
	// Signal names the signal that killed the command ("killed",
	// "terminated"); "" when it exited.
	Signal string `json:"signal,omitempty"`
	// TimedOut is set when the command's timeout killed it.
	TimedOut bool `json:"timed_out"`
	// OOMKilled is set when the OOM killer killed a process of the
	// command's tree (the sandbox's cgroup counted a kill while it ran);
	// Signal says whether the command itself died. Without a cgroup
	// memory controller it is always false.
	OOMKilled bool `json:"oom_killed"`
}

// setStatus fills e from a wait status; a timeout, already set, wins.
func (e *Exit) setStatus(status syscall.WaitStatus) {
	switch {
	case e.TimedOut:
		e.ExitCode = 124
	case status.Signaled():
		e.Signal, e.ExitCode = status.Signal().String(), 128+int(status.Signal())
	default:
		e.ExitCode = status.ExitStatus()
	}
}

// Report describes one run: how it ended and which protections held.
type Report struct {
	Exit
	// Tier is the tier that ran: TierFull or TierReduced.
	Tier Tier `json:"tier"`
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

// MarshalJSON adds wall time in seconds.
func (r *Report) MarshalJSON() ([]byte, error) {
	type plain Report
	return json.Marshal(struct {
		*plain
		WallSeconds float64 `json:"wall_time_seconds"`
	}{(*plain)(r), r.WallTime.Seconds()})
}

func (r *Report) add(name string, s Status, detail string) {
	r.Protections = append(r.Protections, Protection{Name: name, Status: s, Detail: detail})
}
