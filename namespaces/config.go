package namespaces

import (
	"errors"
	"time"

	"github.com/tent-sandbox/tent/fs"
)

// InitArg0 is the argv[0] that makes the host binary act as a sandbox init.
const InitArg0 = "tent-init"

// IdleArg0 is the argv[0] of the idle holder that stands in for the init
// of an idle long-lived sandbox (see [DefaultIdleAfter]).
const IdleArg0 = "tent-idle"

// IdleSupervisorArg0 is the argv[0] of the idle holder that stands in
// for an idle CLI supervisor (see [ExecSupervisorHolder]).
const IdleSupervisorArg0 = "tent-idle-supervisor"

// ExecArg0 is the argv[0] of the rlimit trampoline: the host binary again,
// run inside the sandbox (already restricted) when the command needs
// resource limits, which are per-process and so cannot be set on the init
// without limiting the init itself. It applies the limits named by
// [rlimitsEnv] and execs argv[1:]. For a command run as root (Exec.Root)
// it starts unrestricted in a nested user namespace and restricts itself
// first (see spawnRoot and [restrictEnv]).
const ExecArg0 = "tent-exec"

// rlimitsEnv carries the trampoline's limits; it is removed from the
// environment before the command runs.
const rlimitsEnv = "TENT_RLIMITS"

// ErrInitMissing means the re-executed binary did not act as an init: the
// program did not call sandbox.Init (or namespaces.MaybeRunInit) first.
var ErrInitMissing = errors.New("the re-executed program did not start a sandbox init: call sandbox.Init() at the top of main")

// DefaultIdleAfter is the default of [Config.IdleAfter]: how long a
// long-lived sandbox's init waits without a request, and with no command
// running, before it execs the idle holder (see handOff), a C loop that
// holds the sandbox in under 1 MiB and execs the init again at the next
// request. That request then pays the Go runtime's start-up (about 10 ms
// on a 2-vCPU VM). Builds without cgo have no holder and only trim.
const DefaultIdleAfter = 10 * time.Second

// Ports of the proxy listeners inside the sandbox (its own network
// namespace, so they collide with nothing on the host).
const (
	ProxyHTTPPort  = 3128
	ProxySOCKSPort = 1080
)

// Reserved exit codes of the init process.
const (
	ExitSetupFailed = 120
	ExitProtocol    = 121
)

// Config is everything the init needs; the host sends it as the first
// message. Its zero value is not useful: the sandbox package fills it.
type Config struct {
	// Plan builds the root filesystem.
	Plan *fs.Plan `json:"plan"`
	// Hostname is set in the new UTS namespace.
	Hostname string `json:"hostname"`
	// Loopback brings up lo (own network namespace).
	Loopback bool `json:"loopback"`
	// Sysctls are written under /proc/sys, in name order, before the
	// root filesystem is built: sysctls of the init's own IPC and network
	// namespaces, which the sandbox package has checked.
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// ProxyListeners makes the init listen on [ProxyHTTPPort] and
	// [ProxySOCKSPort] of 127.0.0.1 inside the sandbox's network namespace
	// and hand both listening sockets to the host with the "started"
	// message: the host accepts the sandbox's proxy connections on them
	// directly, so no proxy listener exists on the host.
	ProxyListeners bool `json:"proxy_listeners,omitempty"`
	// Transparent (with ProxyListeners) catches the connections of
	// programs that ignore the proxy variables: the init adds a local
	// default route (IPv4 and IPv6) on lo, so that every address is the
	// sandbox's own, and hands the host, after the two proxy listeners, a
	// UDP socket on port [DNSPort] of every address (the stub DNS) and one
	// listener on every address for each of CatchPorts, in that order.
	Transparent bool `json:"transparent,omitempty"`
	// CatchPorts are the TCP ports caught on every address (Transparent).
	CatchPorts []int `json:"catch_ports,omitempty"`
	// LandlockABI is the ABI to enforce; 0 disables Landlock.
	LandlockABI int `json:"landlock_abi"`
	// LandlockRules are the path rules, inside paths.
	LandlockRules []fs.LandlockRule `json:"landlock_rules,omitempty"`
	// Seccomp is a marshaled seccomp.Program, or several stacked
	// (seccomp.MarshalStack: each installed, the stricter verdict wins);
	// empty means unconfined.
	Seccomp []byte `json:"seccomp,omitempty"`
	// ReuseThread lets the init keep one restricted thread for the
	// sandbox's lifetime and fork every exec that needs no extra Landlock
	// rule from it, instead of restricting a fresh thread per exec. The
	// host sets it only for seccomp programs known to allow every system
	// call the Go runtime makes while that thread waits (tent's default
	// profile, or none): under an arbitrary custom profile the waiting
	// thread could be refused a futex and bring the init down.
	ReuseThread bool `json:"reuse_thread,omitempty"`
	// HostView makes the init keep a copy of the host's mount table (see
	// fs.SaveHostView) so that mounts can be attached to the running
	// sandbox from host paths; the host sets it for callers whose mount
	// sources the init opens itself (not root, who passes descriptors).
	HostView bool `json:"host_view,omitempty"`
	// IdleAfter is how long the init of a long-lived sandbox may sit with
	// no request and no command running before it gives way to the idle
	// holder; 0 means [DefaultIdleAfter], a negative value never.
	IdleAfter time.Duration `json:"idle_after,omitempty"`
	// Rlimits are applied to the command (through the trampoline, see
	// ExecArg0), never to the init.
	Rlimits []Rlimit `json:"rlimits,omitempty"`
	// Sudo makes the init listen at SudoSocket and start the sudo
	// helper when a connection waits (see SudoHelperArg0): the plan must
	// have a writable tmpfs at SudoDir and tent's binary at SudoBinary.
	// It needs the sandbox's own user namespace, like Exec.Root.
	Sudo bool `json:"sudo,omitempty"`
	// CommandsCgroup says that the last descriptor sent with the config
	// is the file through which a thread joins the sandbox cgroup's child
	// that carries its pids limit (cgroups.Cgroup.OpenCommandsJoin): each
	// restricted thread writes "0" to it, after it unshares its cgroup
	// namespace (whose root stays the sandbox cgroup, which the cgroup
	// view shows) and before it forks commands, so that every command
	// counts against the limit and the init's own threads do not.
	CommandsCgroup bool `json:"commands_cgroup,omitempty"`
	// Exec is the command to run at once (a one-shot sandbox, which ends
	// when it exits). When its Path is empty the init reports "ready" and
	// runs the commands of exec messages until the host closes the socket.
	Exec Exec `json:"exec"`
}

// Exec describes the command.
type Exec struct {
	// Path is the program: a name looked up in Env's PATH inside the
	// sandbox, or a path.
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
	// FileHelper runs tent's own file helper (files.FileHelperArg0) instead
	// of Path: the host binary, reached through a descriptor the init
	// holds and allowed by one Landlock execute rule.
	FileHelper bool `json:"file_helper,omitempty"`
	// TTY, when set, runs the command on a new terminal of the sandbox's
	// own devpts instance, of this initial size: the init opens
	// /dev/pts/ptmx, the command is the leader of a new session with the
	// terminal's peer as its controlling terminal and fds 0, 1 and 2, and
	// the master comes back to the host with the "started" message. The
	// stdio descriptors of the request are then not used.
	TTY *WindowSize `json:"tty,omitempty"`
	// Root runs the command as uid and gid 0 of a user namespace of its
	// own, nested in the sandbox's, whose one mapped id is the init's
	// (the sandbox's user): root in its own view, with every capability
	// set empty and every restriction of any other command (see
	// spawnRoot). It needs the sandbox's own user namespace, and is
	// refused with FileHelper.
	Root bool `json:"root,omitempty"`
	// User, when set, runs the command as these ids of the sandbox's user
	// namespace, with these supplementary groups, rather than as the
	// init's (which has none): every id must be mapped (a root caller's
	// id range, sandbox.Spec.IDRange), or the command fails to start
	// (stage "credentials", EINVAL). Refused with Root.
	User *Creds `json:"user,omitempty"`
}

// WindowSize is a terminal's size in character cells.
type WindowSize struct {
	Rows uint16 `json:"rows"`
	Cols uint16 `json:"cols"`
}

// Rlimit is one resource limit (RLIMIT_* number, soft and hard).
type Rlimit struct {
	Resource int    `json:"resource"`
	Cur      uint64 `json:"cur"`
	Max      uint64 `json:"max"`
}

// message is the unit of the control protocol.
type message struct {
	Type string `json:"type"`
	// ID names an exec of a long-lived sandbox ("" is a one-shot command).
	ID     string  `json:"id,omitempty"`
	Exec   *Exec   `json:"exec,omitempty"`
	Attach *Attach `json:"attach,omitempty"`
	Config *Config `json:"config,omitempty"`
	// Ports, in a "listen" request, are more ports to catch
	// (Config.CatchPorts); Port, in a "dial" request, the port of the
	// sandbox's loopback to connect to (V6: ::1 rather than 127.0.0.1).
	Ports []int `json:"ports,omitempty"`
	Port  int   `json:"port,omitempty"`
	V6    bool  `json:"v6,omitempty"`
	Pid   int   `json:"pid,omitempty"`
	// Status is a raw wait status (syscall.WaitStatus).
	Status uint32 `json:"status,omitempty"`
	Signal int    `json:"signal,omitempty"`
	Stage  string `json:"stage,omitempty"`
	Error  string `json:"error,omitempty"`
	Errno  int    `json:"errno,omitempty"`
	// TTY, in a "started" message, says that the last descriptor
	// attached is the master of the command's terminal (Exec.TTY).
	TTY bool `json:"tty,omitempty"`
	// Stamps, in a one-shot init's "started" or a long-lived one's
	// "ready" message, are its [Phases].
	Stamps []int64 `json:"stamps,omitempty"`
	// tty is, on the host, the received master (-1: none).
	tty int
	// fds are, on the host, the descriptors a "done" message carried
	// (the answer to "listen" or "dial").
	fds []int
}

const (
	msgHello   = "hello"
	msgConfig  = "config"
	msgStarted = "started"
	msgError   = "error"
	msgSignal  = "signal"
	msgReady   = "ready"
	msgExec    = "exec"
	msgKill    = "kill"
	msgExit    = "exit"
	msgAttach  = "attach"
	msgDone    = "done"
	msgListen  = "listen"
	msgDial    = "dial"
	// msgQuit asks the init to exit with Status (see Init.Quit).
	msgQuit = "quit"
	// msgWake, from the supervisor's idle holder, only wakes an idle init
	// (see ExecSupervisorHolder); the init ignores it.
	msgWake = "wake"
)

// Attach is a mount to add to a running sandbox: the plan step, and the
// Landlock rules that the next execs need for it (a writable mount).
type Attach struct {
	Step fs.Step `json:"step"`
	// Guards are mounts beneath Step, made right after it (the git
	// guards of a rw mount): the init attaches Step and every guard, or
	// none of them.
	Guards []fs.Step         `json:"guards,omitempty"`
	Rules  []fs.LandlockRule `json:"rules,omitempty"`
}

// Creds are the ids a restricted thread switches to before it drops its
// capabilities (see [RestrictThread]): in the reduced tier, host ids (how a
// root caller's command avoids running as host root where no user
// namespace maps it elsewhere); in a sandbox, ids of its user namespace
// ([Exec].User).
type Creds struct {
	UID    uint32   `json:"uid"`
	GID    uint32   `json:"gid"`
	Groups []uint32 `json:"groups,omitempty"`
	// Caps are the capabilities the command keeps (a mask of CAP_*
	// bits, in the terms of its user namespace: the sandbox's) when it
	// runs as uid 0, in every set but under no_new_privs; 0, the
	// default, is none (see [CapabilityNumber]).
	Caps uint64 `json:"caps,omitempty"`
	// Ambient, a part of Caps, are kept whatever the command's uid (the
	// ambient set).
	Ambient uint64 `json:"ambient,omitempty"`
}
