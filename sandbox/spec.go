package sandbox

import (
	"fmt"
	"net"
	"net/netip"
	"strconv"
	"time"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/seccomp"
)

// Spec describes a sandbox. The zero value is the most restrictive
// sandbox: no mounts beyond the system directories, no network, the
// built-in seccomp profile, every protection required.
//
// Its fields are grouped by concern: what the sandbox sees of files
// ([Filesystem]), whom and what its commands start as ([Identity]), what
// it may reach and what reaches it ([Networking]), what it may spend
// ([Limits]) and which syscalls it may make ([Seccomp]), beside the
// kernel settings of its own namespaces (Sysctls) and how strictly the
// whole is enforced (Tier, BestEffort). The groups are embedded, so a
// field reads as before (spec.Mounts, spec.Network) while a literal names
// its group:
//
//	sandbox.Spec{
//		Filesystem: sandbox.Filesystem{Mounts: mounts},
//		Networking: sandbox.Networking{Network: policy},
//		Limits:     sandbox.Limits{Timeout: time.Minute},
//	}
//
// An embedded group has no JSON name of its own: a Spec's JSON is flat,
// as tent has always written it in state records, snapshot manifests and
// tent-server's state ({"mounts":[...],"network":{...},"limits":{...}}),
// so older records read unchanged and older tents read newer ones.
// Limits and Seccomp were groups already, with JSON objects of their own;
// Sysctls, Tier and BestEffort stay at the top: Sysctls spans the IPC and
// network namespaces, and Tier and BestEffort concern every protection.
type Spec struct {
	// Name, when not "", is another reference to the sandbox, unique
	// among its backend's sandboxes (package supervised refuses a second
	// sandbox of the same name; [Local] keeps it as data). It is not
	// inherited by forks. It never changes the sandbox's isolation.
	Name string `json:"name,omitempty"`
	// Labels are the caller's metadata, kept with the sandbox and
	// returned with it; they never change its isolation.
	Labels map[string]string `json:"labels,omitempty"`
	// Filesystem: the root, mounts, tmpfs, masked and read-only paths.
	Filesystem
	// Identity: the user, hostname, sudo, working directory and
	// environment of the commands.
	Identity
	// Networking: the network policy and the published ports.
	Networking
	// Service, when not nil, is the command the sandbox runs for as long
	// as it lives, with its readiness check (see [Service]).
	Service *Service `json:"service,omitempty"`
	// Limits bound the sandbox's resources.
	Limits Limits `json:"limits"`
	// Seccomp selects the syscall filter.
	Seccomp Seccomp `json:"seccomp"`
	// Sysctls are set in the sandbox's own namespaces before its command
	// starts, as docker's --sysctl: those of its IPC namespace
	// (kernel.msgmax, kernel.msgmnb, kernel.msgmni, kernel.sem,
	// kernel.shm_rmid_forced, kernel.shmall, kernel.shmmax, kernel.shmmni,
	// fs.mqueue.*) and, unless the network mode is host, of its network
	// namespace (net.*, such as net.ipv4.ping_group_range). Nothing of the
	// host's changes; any other name is ErrInvalidSpec, a value the kernel
	// refuses, or a sysctl it does not give a user namespace's network
	// (net.core.somaxconn on Linux 6.1, for one), fails the start naming
	// the sysctl, and the reduced tier
	// (no namespaces of its own) cannot set any. The kernel lets only the
	// IPC namespace's root set its sysctls: the IPC ones need the
	// sandbox's user to be uid 0 inside (a root caller's default;
	// ErrInvalidSpec otherwise).
	Sysctls map[string]string `json:"sysctls,omitempty"`
	// Tier forces the full or the reduced tier; the zero value picks the
	// full tier when user namespaces are available (see [Tier]).
	Tier Tier `json:"tier,omitempty"`
	// BestEffort runs even when the host cannot provide a requested
	// protection; each missing one is reported. Without it, Start fails
	// with an [*UnsupportedError].
	BestEffort bool `json:"best_effort,omitempty"`
}

// Filesystem is what a sandbox sees of files, a group of [Spec]: its
// root, the host paths bound into it, its tmpfs, and what is hidden or
// read-only.
type Filesystem struct {
	// Mounts bind host paths into the sandbox (the CLI's SRC[:DST]
	// form is parsed by policy.ParseMount).
	Mounts []Mount `json:"mounts,omitempty"`
	// Root, when not nil, replaces tent's root filesystem (a tmpfs with
	// the host's system directories bound read-only, /tmp and $HOME) by
	// a host directory, such as an OCI bundle's rootfs. /proc and /dev
	// stay tent's own; Mounts are bound beneath it; the root is nosuid
	// and nodev. A root caller's writable root is idmapped as a rw
	// mount is (see package fs's OpenMounts), and so needs tent's
	// default seccomp profile when the directory is root's. The reduced
	// tier cannot provide it.
	Root *Root `json:"root,omitempty"`
	// Tmpfs are targets inside for empty, writable tmpfs mounts (mode
	// 0755, nosuid, nodev), validated as mount targets are; nothing
	// written there reaches the host. Snapshots keep them, as /tmp.
	Tmpfs []string `json:"tmpfs,omitempty"`
	// WritableRoot lets the sandbox create files and directories
	// anywhere in tent's root tmpfs (a file at /0/a.txt, a directory
	// /work), as a VM's or E2B's root filesystem allows; without it the
	// root is read-only outside /tmp, $HOME and the writable mounts
	// (EROFS). Nothing written there reaches the host: the root is the
	// sandbox's own tmpfs, charged to its memory limit like /tmp. The
	// host's system directories (/usr, /etc...), /dev and read-only
	// mounts stay read-only mounts (EROFS), and /proc keeps the kernel's
	// own permissions. Snapshots keep what was written there (not the
	// mounts on it), and forks and resumed sandboxes get it back. It
	// cannot be combined with Root; the reduced tier cannot provide it.
	WritableRoot bool `json:"writable_root,omitempty"`
	// MaskedPaths are hidden once everything is mounted (a directory
	// under an empty read-only tmpfs, a file under /dev/null), and
	// ReadOnlyPaths bound read-only onto themselves: an OCI bundle's
	// linux.maskedPaths and readonlyPaths. Paths that do not exist in
	// the sandbox are left alone; /proc and /sys paths are allowed.
	MaskedPaths   []string `json:"masked_paths,omitempty"`
	ReadOnlyPaths []string `json:"readonly_paths,omitempty"`
	// GitWritable lets the sandbox write the control files of the git
	// repositories in its rw mounts. By default each repository's
	// .git/hooks and .git/config (and its submodules') are read-only
	// inside, and .git itself cannot be renamed or replaced, so that
	// nothing the sandbox writes there runs when the host user next runs
	// git; commits, branches, fetches and stashes still work. See
	// docs/security.md for what this covers and what it does not.
	GitWritable bool `json:"git_writable,omitempty"`
}

// Identity is whom and what a sandbox's commands start as, a group of
// [Spec]: the user and hostname inside, a sudo command, the working
// directory and the environment ([ExecRequest] adds to these per command).
type Identity struct {
	// User is the identity inside; nil means the caller's uid and gid for
	// an unprivileged caller and 0:0 for root (which never maps to host
	// root: see the package documentation).
	User *User `json:"user,omitempty"`
	// IDRange, for a root caller, maps Size ids inside (0 to Size-1)
	// onto host ids from Host, rather than the one id tent maps
	// otherwise: every user of an image keeps its own id (uid 101 is 101
	// inside and Host+101 on the host; host root is never one of them),
	// commands may run as any of them ([ExecRequest].User) with
	// supplementary groups ([User].Groups), and every mount, Root
	// included, is idmapped so that an on-disk id k is k inside: an
	// image's root and its own users write what its files let them
	// write, as under runc. What the sandbox writes to a rw mount is then
	// on disk under its own ids (a root-owned directory written as root,
	// as the package documentation says; set-id modes stay refused).
	// An overlay Root (a container image's) is rebuilt over idmapped
	// lower layers (Linux 5.19). Refused for an unprivileged caller and
	// in the reduced tier. tent-runc uses it for every container.
	IDRange *IDRange `json:"id_range,omitempty"`
	// Capabilities are held by every command that runs as uid 0 inside
	// (as an OCI process's bounding, permitted and effective sets), and
	// AmbientCapabilities, a part of them, by every command whatever its
	// uid ([ExecRequest] may give its own of both). They hold in the
	// sandbox's own user namespace only: over its own
	// network, ipc and pid namespaces and the ids it maps, never the
	// host's. Names as capabilities(7) gives them, with or without CAP_:
	// the ones an image's programs use to set up and drop privileges
	// (CHOWN, DAC_OVERRIDE, FOWNER, FSETID, KILL, SETGID, SETUID,
	// SETPCAP, NET_BIND_SERVICE, NET_BROADCAST, NET_ADMIN, IPC_LOCK,
	// IPC_OWNER, SYS_CHROOT, MKNOD, LEASE, AUDIT_WRITE); any other is
	// refused, naming it (NET_RAW too: the seccomp filter refuses raw
	// sockets). Commands still run under no_new_privs,
	// Landlock and the seccomp filter, which refuses mount, set-id modes
	// and the like whatever capability a command holds. nil: none.
	Capabilities        []string `json:"capabilities,omitempty"`
	AmbientCapabilities []string `json:"ambient_capabilities,omitempty"`
	// Hostname inside; "" means [DefaultHostname], never the host's.
	Hostname string `json:"hostname,omitempty"`
	// Workdir is the command's working directory inside; "" means "/".
	Workdir string `json:"workdir,omitempty"`
	// Env is layered, in order, over the base environment: the clean
	// default (PATH, HOME, TERM, LANG, TZ, USER) or, with EnvInherit, the
	// caller's whole environment. Entries are "KEY=VALUE".
	Env []string `json:"env,omitempty"`
	// EnvInherit makes the caller's whole environment the base.
	EnvInherit bool `json:"env_inherit,omitempty"`
	// Sudo gives the sandbox a sudo command, found ahead of any host
	// sudo by every PATH (it appears in /usr/local/bin), for programs
	// and users that expect one (E2B's user has passwordless sudo). It
	// runs the command as root of a user namespace nested in the
	// sandbox's, as [ExecRequest].AsRoot does: root in its own view, with
	// nothing the sandbox's user lacks (no capability, no_new_privs,
	// Landlock, seccomp and the limits as for any command), so mounting
	// stays EPERM and read-only paths EROFS. It is tent's own binary,
	// bound read-only, and needs no sudo on the host; see docs/security.md
	// for how a command reaches it. It needs the full tier and tent's
	// root filesystem (not Root).
	Sudo bool `json:"sudo,omitempty"`
}

// Networking is what a sandbox may reach and what reaches it, a group of
// [Spec]: the network policy and the ports published on the host.
type Networking struct {
	// Network is the network policy; the zero value is mode none (own
	// network namespace, loopback only). Limited mode reaches allowed hosts
	// through tent's host-side proxy; host shares the host's network.
	Network NetworkPolicy `json:"network"`
	// Ports publish TCP ports of a long-lived sandbox on the host (see
	// [PortMapping], [Sandbox.Publish]); a one-shot [Cmd] and mode host
	// take none.
	Ports []PortMapping `json:"ports,omitempty"`
}

// NetworkPolicy is a sandbox's network policy. In JSON it reads
// {"mode":"limited","allowed_hosts":["example.com"],"denied_hosts":[...]};
// see netpolicy.Policy for the rule syntax.
type NetworkPolicy = netpolicy.Policy

// Mount binds a host path into the sandbox.
type Mount = fs.Mount

// Access is how a sandbox may use a [Mount].
type Access = fs.Access

// Access modes of a [Mount].
const (
	ReadOnly    = fs.ReadOnly
	ReadWrite   = fs.ReadWrite
	CopyOnWrite = fs.CopyOnWrite
)

// PortMapping publishes one TCP port of a sandbox on the host, as
// docker's -p [HOSTIP:]HOSTPORT:PORT does: the host listens on HostIP and
// HostPort, and each connection it accepts is dialled inside the
// sandbox's own network namespace, to Port of its loopback (127.0.0.1,
// then ::1): a server inside must listen on loopback or on every address.
// Nothing else of the host becomes reachable from inside: connections
// only ever go in. In JSON: {"host_ip":"127.0.0.1","host_port":8080,"port":3000}.
type PortMapping struct {
	// HostIP is the host address to listen on; "" means 127.0.0.1 (this
	// machine only). Another address makes the port reachable from
	// wherever that address is.
	HostIP string `json:"host_ip,omitempty"`
	// HostPort is the host port; 0 means a free one, chosen when the port
	// is published ([Sandbox.Publish] and [Sandbox.Info] report it).
	HostPort int `json:"host_port"`
	// Port is the TCP port inside the sandbox, 1-65535.
	Port int `json:"port"`
}

// String renders m as docker port does: "3000/tcp -> 127.0.0.1:8080".
func (m PortMapping) String() string {
	ip := m.HostIP
	if ip == "" {
		ip = "127.0.0.1"
	}
	return fmt.Sprintf("%d/tcp -> %s", m.Port, net.JoinHostPort(ip, strconv.Itoa(m.HostPort)))
}

// validate checks m's fields.
func (m PortMapping) validate() error {
	if m.Port < 1 || m.Port > 65535 {
		return fmt.Errorf("port %d is not in 1-65535", m.Port)
	}
	if m.HostPort < 0 || m.HostPort > 65535 {
		return fmt.Errorf("host_port %d is not in 0-65535", m.HostPort)
	}
	if m.HostIP != "" {
		a, err := netip.ParseAddr(m.HostIP)
		if err != nil || a.Zone() != "" {
			return fmt.Errorf("host_ip %q is not an IP address", m.HostIP)
		}
	}
	return nil
}

// Root is a host directory used as a sandbox's root filesystem
// ([Spec].Root).
type Root struct {
	// Path is the directory's absolute host path. It is opened without
	// following symlinks.
	Path string `json:"path"`
	// ReadOnly mounts it read-only (writes fail with EROFS); otherwise
	// the sandbox's writes reach the directory, as a rw mount's do.
	ReadOnly bool `json:"readonly,omitempty"`
	// MakeMountPoints has the caller, on the host, create the missing
	// mount points of the sandbox's mounts, tmpfs, /proc and /dev in
	// Path before the sandbox starts (directories, or empty files for
	// binds of files), beneath Path without following symlinks, as runc
	// does with a bundle: for a read-only root, or one the sandbox's
	// user cannot write. Without it a missing mount point is made by
	// the sandbox, which fails where it may not write.
	MakeMountPoints bool `json:"make_mount_points,omitempty"`
}

// mount is r as the root mount of the mount plan.
func (r *Root) mount() *fs.Mount {
	m := &fs.Mount{Source: r.Path, Target: "/", Access: fs.ReadWrite}
	if r.ReadOnly {
		m.Access = fs.ReadOnly
	}
	return m
}

// DefaultHostname is the sandbox's hostname when the spec sets none.
const DefaultHostname = "tent"

// User is an identity inside the sandbox.
type User struct {
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// Name, when not "", is the user's name inside: $USER is Name and
	// $HOME, the sandbox's private, writable home (captured by snapshots
	// and forks like /tmp), is /home/Name. "" keeps the defaults: root
	// and /root for uid 0, the caller's name (or userUID) under /home
	// otherwise. It must be a valid user name (a letter or digit, then up
	// to 62 letters, digits, '.', '-' or '_').
	Name string `json:"name,omitempty"`
	// Groups are the supplementary groups of the user's commands (at
	// most 64); they need Spec.IDRange, each below its Size.
	Groups []uint32 `json:"groups,omitempty"`
}

// IDRange is a range of host ids a root caller's sandbox maps its ids
// onto: see [Identity].IDRange.
type IDRange struct {
	// Host is the first host uid and gid: id 0 inside is Host outside.
	// It must not be 0.
	Host uint32 `json:"host"`
	// Size is how many ids are mapped (1 to 1<<24).
	Size uint32 `json:"size"`
}

// maxGroups bounds [User].Groups.
const maxGroups = 64

// Limits bound a sandbox's resources; a zero field means no limit.
type Limits struct {
	// Memory in bytes (cgroup memory.max with swap off; with BestEffort
	// and no cgroup, RLIMIT_AS).
	Memory int64 `json:"memory,omitempty"`
	// Pids is the maximum number of processes and threads of the
	// commands (cgroup pids.max of a child cgroup that holds them, with
	// the one thread of tent's init that forks them; the init's own
	// threads are not counted, so a command that fills the limit never
	// leaves the init without one; with BestEffort and no cgroup,
	// RLIMIT_NPROC).
	Pids int64 `json:"pids,omitempty"`
	// CPUs is the CPU bandwidth in cores, e.g. 0.5 (cgroup cpu.max).
	CPUs float64 `json:"cpus,omitempty"`
	// Timeout is the wall-clock limit; the whole process tree is killed
	// when it expires and the run is reported as timed out.
	Timeout time.Duration `json:"timeout,omitempty"`
	// NoFile is RLIMIT_NOFILE (soft and hard).
	NoFile uint64 `json:"nofile,omitempty"`
}

// Seccomp selects the syscall filter. The zero value is tent's built-in
// default profile.
type Seccomp struct {
	// Unconfined disables the filter (reported as absent).
	Unconfined bool `json:"unconfined,omitempty"`
	// Profile, when set, replaces the built-in profile (an OCI/Docker
	// seccomp profile, see seccomp.Load).
	Profile *seccomp.Profile `json:"profile,omitempty"`
	// KeepDefault applies Profile in addition to the built-in profile
	// rather than instead of it: both filters are installed, and the
	// kernel takes the stricter verdict of the two, so a profile can
	// only narrow what tent allows (tent-runc does this with a bundle's
	// linux.seccomp: Kubernetes' RuntimeDefault and Localhost profiles).
	KeepDefault bool `json:"keep_default,omitempty"`
}

// keepsDefault reports whether commands run the built-in profile, alone
// or under a custom one.
func (s Seccomp) keepsDefault() bool {
	return !s.Unconfined && (s.Profile == nil || s.KeepDefault)
}
