package sandbox

import (
	"context"
	"errors"
	"io"
	"net"
	"slices"
	"time"
)

// Backend is the set of sandboxes every frontend uses (the tent CLI, an
// HTTP API, an embedding program): [Local] runs sandboxes in the calling
// process; package supervised runs each under a supervisor process of its
// own, durable across the caller's exit. The set provisions, forks and
// lists sandboxes; [Backend.Open] returns a [Handle] on one of them, which
// carries everything else, so a verb is written once per backend, on its
// handle. A sandbox is named by the id its backend gave it, or by a unique
// prefix of it (or, where the backend keeps names, by its Spec.Name): an
// unknown reference fails with [ErrNotFound], an ambiguous one with
// [ErrAmbiguous]. Errors are the sentinel errors of this package on every
// backend, whatever process they crossed. Every method honours its ctx
// (its deadline and cancellation, across processes too) and is safe for
// concurrent use.
type Backend interface {
	// Name identifies the backend, for example "local".
	Name() string
	// Capabilities reports what the backend can do on this host. It is
	// cheap: backends probe once, when they are created.
	Capabilities() Capabilities
	// Provision starts a sandbox from spec. A malformed spec fails with
	// [ErrInvalidSpec] and a protection the host cannot provide with an
	// [*UnsupportedError]; nothing is left behind either way.
	Provision(ctx context.Context, spec Spec) (Info, error)
	// Fork provisions a new, independent sandbox from a snapshot (an
	// exact snapshot id or a unique prefix), with overrides applied to
	// the snapshot's spec.
	Fork(ctx context.Context, snapshotID string, overrides ForkOverrides) (Info, error)
	// List returns the backend's sandboxes, oldest first.
	List(ctx context.Context) ([]Info, error)
	// Open resolves ref once and returns a handle on that sandbox. It
	// holds nothing: a handle needs no closing, and its calls fail with
	// [ErrNotFound] once the sandbox is terminated.
	Open(ctx context.Context, ref string) (Handle, error)
}

// Handle is one sandbox of a [Backend] (see [Backend.Open]): the verbs
// that act on a sandbox. Its methods are safe for concurrent use.
type Handle interface {
	// ID is the sandbox's id, as the backend names it.
	ID() string
	// Info describes the sandbox now.
	Info(ctx context.Context) (Info, error)
	// Exec runs one command and waits for it, its stdio streamed and, with
	// req.TTY, on a terminal (see [Sandbox.Exec]): Start + Wait, the
	// command listed (Processes) and found by pid (Process) while it
	// runs, but its stdio the caller's.
	Exec(ctx context.Context, req ExecRequest) (*ExecResult, error)
	// Start starts a command the sandbox owns, not the caller (see
	// [Process]), and returns it without waiting: its pid inside, its
	// stdin (opts.Stdin) and its output, kept in the sandbox for any later
	// caller. req is read as Exec reads it, but for its stdio: Stdin,
	// Stdout, Stderr and Signals must be nil (ErrInvalidSpec), and TTY
	// gives only the terminal's size (Process.Resize resizes it).
	// Timeout applies from the start; ctx bounds the start only.
	Start(ctx context.Context, req ExecRequest, opts StartOptions) (Process, error)
	// Process finds a command Start started, from any caller (another
	// Handle, another process); an unknown pid, or one whose record has
	// gone, is [ErrNoProcess].
	Process(ctx context.Context, pid int) (Process, error)
	// Processes describes the commands Start started, running and
	// finished (kept an hour; 64 at most), oldest first.
	Processes(ctx context.Context) ([]ProcessInfo, error)
	// The file verbs (see [Sandbox.ReadFile] and the others for each)
	// run tent's file helper inside the sandbox, with the sandbox's own
	// view and restrictions; a failure it reports is an *os.PathError
	// carrying the errno, on every backend (errors.Is(err,
	// fs.ErrNotExist) works).
	//
	// ReadFile streams the regular file at path to w.
	ReadFile(ctx context.Context, path string, w io.Writer, opts ReadOptions) error
	// WriteFile makes or replaces, as one step, the file at path with
	// r's content, and describes it.
	WriteFile(ctx context.Context, path string, r io.Reader, opts WriteOptions) (FileInfo, error)
	// Stat describes the file at path, not following a final symlink.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// ReadDir lists the directory at path, depth levels down.
	ReadDir(ctx context.Context, path string, depth int) ([]FileInfo, error)
	// Mkdir makes the directory at path and its missing parents.
	Mkdir(ctx context.Context, path string) (FileInfo, error)
	// Rename renames from to to, and describes to.
	Rename(ctx context.Context, from, to string) (FileInfo, error)
	// Remove deletes the file or empty directory at path; with all, the
	// tree.
	Remove(ctx context.Context, path string, all bool) error
	// Watch streams the changes of the directory at path until ctx ends.
	Watch(ctx context.Context, path string, opts WatchOptions) (<-chan WatchEvent, error)
	// File runs a raw file operation, an archive streamed out of the
	// sandbox or into it (see [Sandbox.File]).
	File(ctx context.Context, req FileRequest) error
	// Mount adds m to the running sandbox (see [Sandbox.Mount]); m is
	// validated as provisioning validates mounts (ErrInvalidSpec).
	Mount(ctx context.Context, m Mount) error
	// SetNetworkPolicy replaces a limited sandbox's rules, its header
	// transforms among them; its secrets that are variables are kept (see
	// [Cmd.SetNetworkPolicy]). The mode itself is chosen at provision time
	// (ErrUnsupported otherwise).
	SetNetworkPolicy(ctx context.Context, p NetworkPolicy) error
	// SetLimits changes the running sandbox's memory, pids and CPU
	// limits: each that is not zero in l replaces the one in force (see
	// [Sandbox.SetLimits]); a limit the host cannot apply live is
	// [ErrUnsupported], and nothing changes.
	SetLimits(ctx context.Context, l Limits) error
	// Snapshot saves the sandbox's writable layers and spec (see
	// [Sandbox.Snapshot]) where Fork and Resume find them.
	Snapshot(ctx context.Context) (*Snapshot, error)
	// Suspend freezes every process of the sandbox (ErrUnsupported when
	// Capabilities().Suspend is false).
	Suspend(ctx context.Context) error
	// Resume thaws a suspended sandbox; a sandbox that has ended (its
	// Limits.Timeout, its owner's restart, Stop) is provisioned again,
	// under the same id, from its latest snapshot. With no snapshot to
	// resume from it fails with [ErrTerminated].
	Resume(ctx context.Context) (Info, error)
	// Stop ends every process of the sandbox and keeps it, stopped
	// (StateStopped), as its Limits.Timeout running out does: Resume then
	// provisions it again, under the same id, from its latest snapshot
	// (take one first to keep its files). Stopping a stopped sandbox does
	// nothing.
	Stop(ctx context.Context) error
	// Terminate kills every process of the sandbox and removes what it
	// held; the backend forgets it (its snapshots stay).
	Terminate(ctx context.Context) error
	// Usage reads what the sandbox uses now from its cgroups
	// (ErrUnsupported without a cgroup).
	Usage(ctx context.Context) (Usage, error)
	// Dial connects to a TCP port of the sandbox's loopback, inside its
	// network namespace (see [Sandbox.DialPort]); the caller owns the
	// connection.
	Dial(ctx context.Context, port int) (net.Conn, error)
}

// State is where a sandbox is in its lifecycle.
type State string

// States of a sandbox ([Info.State]).
const (
	// StateRunning: commands can run.
	StateRunning State = "running"
	// StateSuspended: frozen until Resume.
	StateSuspended State = "suspended"
	// StateStopped: ended (Limits.Timeout, or its init died) but not yet
	// terminated; Resume brings it back from its latest snapshot.
	StateStopped State = "stopped"
)

// Info describes one sandbox of a [Backend]: plain data, a copy taken
// when it was returned.
type Info struct {
	// ID names the sandbox within its backend (16 hex digits for Local).
	ID string `json:"id"`
	// Backend is the backend's Name.
	Backend string `json:"backend"`
	// State is the sandbox's state when the Info was returned.
	State State `json:"state"`
	// Created is when the sandbox (its current incarnation, after a
	// Resume from a snapshot) was provisioned.
	Created time.Time `json:"created"`
	// Spec is the spec the sandbox runs with, including network rules
	// applied since.
	Spec Spec `json:"spec"`
	// InitPID is the host pid of the sandbox's init (0 when the backend
	// runs it elsewhere).
	InitPID int `json:"init_pid,omitempty"`
	// SupervisorPID is the host pid of the process that owns the sandbox
	// when that is not the caller (package supervised's supervisor).
	SupervisorPID int `json:"supervisor_pid,omitempty"`
	// CgroupPaths are the sandbox's cgroup directories on this host.
	CgroupPaths []string `json:"cgroup_paths,omitempty"`
	// Protections reports how each protection is provided.
	Protections []Protection `json:"protections,omitempty"`
	// Layers are the host sides of the sandbox's cow mounts (see
	// [CowLayer]'s Diff, WritePatch and ExportTo).
	Layers []CowLayer `json:"layers,omitempty"`
	// Ended, for a stopped sandbox, is when it ended on its own (its
	// Limits.Timeout ran out, its init died) and Reason says why.
	Ended  *time.Time `json:"ended,omitempty"`
	Reason string     `json:"reason,omitempty"`
}

// ForkOverrides change what a fork takes from its snapshot's spec; the
// zero value changes nothing but the name and the published ports, which
// a fork never takes (its origin holds those host ports). Mounts are not
// overridable: a snapshot's cow layers are restored onto the mounts it was
// taken with.
type ForkOverrides struct {
	// Network, when not nil, replaces the network policy.
	Network *NetworkPolicy
	// Limits, when not nil, replaces the limits.
	Limits *Limits
	// Env is layered over the snapshot's environment (later wins).
	Env []string
	// Hostname, when not "", replaces the hostname.
	Hostname string
	// Name names the fork (a fork never takes its snapshot's name).
	Name string
	// Labels, when not nil, replace the snapshot's labels.
	Labels map[string]string
}

// Apply returns spec with the overrides applied; spec is not modified.
func (o ForkOverrides) Apply(spec Spec) Spec {
	if o.Network != nil {
		spec.Network = *o.Network
	}
	if o.Limits != nil {
		spec.Limits = *o.Limits
	}
	if len(o.Env) > 0 {
		spec.Env = append(slices.Clip(spec.Env), o.Env...)
	}
	if o.Hostname != "" {
		spec.Hostname = o.Hostname
	}
	spec.Name = o.Name
	// A fork publishes no ports: its origin's host ports are taken.
	spec.Ports = nil
	if o.Labels != nil {
		spec.Labels = o.Labels
	}
	return spec
}

// Capabilities is what a [Backend] supports on this host.
type Capabilities struct {
	// Snapshot: Snapshot and Fork work.
	Snapshot bool `json:"snapshot"`
	// Suspend: Suspend works (it needs a cgroup freezer).
	Suspend bool `json:"suspend"`
	// Resume: an ended sandbox can be provisioned again from its latest
	// snapshot (thawing a suspended one needs Suspend).
	Resume bool `json:"resume"`
	// NetworkPolicy: limited mode (allowlisting proxy) works and its
	// rules can be replaced with SetNetworkPolicy.
	NetworkPolicy bool `json:"network_policy"`
	// CgroupVersion is the cgroup interface sandboxes get: "v1", "v2",
	// or "none" (no limits, no freezer, no cgroup kill).
	CgroupVersion string `json:"cgroup_version"`
	// LandlockABI is the Landlock ABI sandboxes are restricted with (the
	// kernel's, capped at the highest tent knows); 0 means none.
	LandlockABI int `json:"landlock_abi"`
}

var (
	// ErrInvalidOptions wraps every error about malformed options or
	// requests of a [Local] or of package manager's Manager (not about a
	// [Spec]); the message names the field.
	ErrInvalidOptions = errors.New("invalid options")
	// ErrClosed is returned by a [Local], or package manager's Manager,
	// after Close.
	ErrClosed = errors.New("closed")
)
