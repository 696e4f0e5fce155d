package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"

	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// ErrUnsupportedConfig is wrapped by the refusal of a bundle's setting
// that tent does not provide (as opposed to a malformed one, which wraps
// sandbox.ErrInvalidSpec).
var ErrUnsupportedConfig = errors.New("unsupported in tent")

// maxConfig bounds config.json (the bundle's directory is the caller's,
// but containerd writes it; a runaway file should not cost memory).
const maxConfig = 4 << 20

// bundle is a bundle's config.json turned into what tent runs: the
// sandbox, and its main process.
type bundle struct {
	Dir    string
	Config *specs.Spec
	Spec   sandbox.Spec
	Main   process
	// NetNS, when not "", is the path of a network namespace to join
	// (linux.namespaces' network path: a pod's, made by CNI): the
	// supervisor is started in it and the sandbox shares it.
	NetNS string
	// Sysctls are network sysctls to set in NetNS.
	Sysctls map[string]string
	// IPCNS, when not "", is the path of an IPC namespace to join
	// (linux.namespaces' ipc path: a CRI pod's, its sandbox container's
	// init's): the supervisor is started in it and the sandbox shares it
	// (supervised.ChildLaunch.ShareIPC). IPCSysctls are the bundle's IPC
	// sysctls, which are the pod's, set there by its sandbox container:
	// checked, not set.
	IPCNS      string
	IPCSysctls map[string]string
	// PIDNS, when not "", is the path of a pid namespace to clone the
	// container's init into (linux.namespaces' pid path: a CRI pod's with
	// shareProcessNamespace, its sandbox container's init's):
	// supervised.ChildLaunch.PIDNamespace. Like IPCNS, it must be a
	// container's, never the host's.
	PIDNS string
	// PodSysctls are a pod sandbox container's IPC sysctls (CRI gives a
	// pod's there, for the IPC namespace its containers share): set in
	// the sandbox container's own, and by tent-runc in each container of
	// the pod, whose IPC namespaces are their own (record.PodSysctls).
	PodSysctls map[string]string
	// joinsUTS is set when the bundle names a uts namespace to join,
	// which tent replaces by the container's own.
	joinsUTS bool
	// Ignored lists the settings tent replaces by its own (tent's /proc,
	// /dev and /sys; its capability and user-namespace policy), for the
	// debug log.
	Ignored []string
}

// process is an OCI process as tent runs it in the sandbox.
type process struct {
	Args     []string `json:"args"`
	Env      []string `json:"env,omitempty"`
	Cwd      string   `json:"cwd"`
	Terminal bool     `json:"terminal,omitempty"`
	UID      uint32   `json:"uid"`
	GID      uint32   `json:"gid"`
	Groups   []uint32 `json:"groups,omitempty"`
	// Caps are the capabilities it keeps, in the container's user
	// namespace (process.capabilities' permitted set, those tent
	// grants); dropped are the others, for the debug log.
	Caps    []string `json:"caps"`
	Ambient []string `json:"ambient"`
	dropped []string
}

// DefaultIDRange is the range of host ids a container of a root
// tent-runc maps its ids 0-65535 onto when its bundle names none
// (linux.uidMappings: Kubernetes' hostUsers: false, ctr --uidmap): just
// above systemd's container range (524288-1879048191), below 2^31. Every
// such container shares it, as runc's share the host's ids; a bundle's
// own mappings give a pod a range of its own.
var DefaultIDRange = sandbox.IDRange{Host: 1879048192, Size: 65536}

// loadBundle reads dir/config.json and converts it (see convert).
func loadBundle(dir string) (*bundle, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("bundle %s: %w", dir, err)
	}
	f, err := os.Open(filepath.Join(abs, "config.json"))
	if err != nil {
		return nil, fmt.Errorf("failed to read the bundle's config: %w", err)
	}
	defer f.Close()
	var cfg specs.Spec
	dec := json.NewDecoder(&limitedReader{f, maxConfig})
	if err := dec.Decode(&cfg); err != nil {
		return nil, fmt.Errorf("%w: %s/config.json: %v", sandbox.ErrInvalidSpec, abs, err)
	}
	return convert(abs, &cfg)
}

type limitedReader struct {
	f *os.File
	n int64
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, fmt.Errorf("config.json is larger than %d bytes", maxConfig)
	}
	if int64(len(p)) > l.n {
		p = p[:l.n]
	}
	n, err := l.f.Read(p)
	l.n -= int64(n)
	return n, err
}

// tentOwned are the mount destinations tent provides itself: its own
// /proc (with /proc/sys and co read-only), minimal /dev, a private devpts
// and /dev/shm, a read-only sysfs (sandbox.ProvisionOptions.Sysfs) with
// the read-only view of the sandbox's cgroup.
var tentOwned = []string{"/proc", "/dev", "/dev/pts", "/dev/shm", "/dev/mqueue", "/sys", "/sys/fs/cgroup"}

// underTentOwned reports whether dst lies beneath /dev, /proc or /sys.
func underTentOwned(dst string) bool {
	for _, d := range []string{"/dev/", "/proc/", "/sys/"} {
		if strings.HasPrefix(dst, d) {
			return true
		}
	}
	return false
}

// convert checks cfg (the bundle in dir) and turns it into a sandbox
// spec and a main process. A malformed setting wraps
// sandbox.ErrInvalidSpec, one tent does not provide
// ErrUnsupportedConfig; each names its field.
func convert(dir string, cfg *specs.Spec) (*bundle, error) {
	b := &bundle{Dir: dir, Config: cfg}
	invalid := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", sandbox.ErrInvalidSpec, field, fmt.Sprintf(format, a...))
	}
	unsupported := func(field, format string, a ...any) error {
		return fmt.Errorf("%w: %s: %s", ErrUnsupportedConfig, field, fmt.Sprintf(format, a...))
	}
	if !strings.HasPrefix(cfg.Version, "1.") {
		return nil, invalid("ociVersion", "%q: want a runtime-spec 1.x config", cfg.Version)
	}
	if cfg.Root == nil || cfg.Root.Path == "" {
		return nil, invalid("root.path", "missing")
	}
	root := cfg.Root.Path
	if !filepath.IsAbs(root) {
		root = filepath.Join(dir, root)
	}
	// As runc does, the runtime (on the host) makes the bundle's
	// missing mount points in its rootfs.
	b.Spec.Root = &sandbox.Root{Path: filepath.Clean(root), ReadOnly: cfg.Root.Readonly, MakeMountPoints: true}

	p := cfg.Process
	if p == nil {
		return nil, invalid("process", "missing: tent-runc runs a container's process")
	}
	main, err := convertProcess(p, "process")
	if err != nil {
		return nil, err
	}
	b.Main = *main
	b.Spec.User = &sandbox.User{UID: p.User.UID, GID: p.User.GID, Groups: main.Groups}
	var dropped []string
	b.Spec.Capabilities, b.Spec.AmbientCapabilities, dropped = main.Caps, main.Ambient, main.dropped
	if len(dropped) > 0 {
		b.Ignored = append(b.Ignored, "process.capabilities "+strings.Join(dropped, ",")+" (not granted in a sandbox: sandbox.Identity.Capabilities)")
	}
	if p.OOMScoreAdj != nil {
		b.Ignored = append(b.Ignored, "process.oomScoreAdj (a sandbox's commands run 1000 above their init's OOM score, capped at 1000: namespaces.CommandOOMScoreAdj)")
	}
	if p.ApparmorProfile != "" || p.SelinuxLabel != "" {
		b.Ignored = append(b.Ignored, "process.apparmorProfile/selinuxLabel (tent confines with Landlock and seccomp)")
	}
	for i, rl := range p.Rlimits {
		field := fmt.Sprintf("process.rlimits[%d]", i)
		if rl.Type != "RLIMIT_NOFILE" {
			return nil, unsupported(field, "%s: tent sets RLIMIT_NOFILE only (memory and pids are cgroup limits: linux.resources)", rl.Type)
		}
		if rl.Soft > rl.Hard {
			return nil, invalid(field, "soft limit %d above hard limit %d", rl.Soft, rl.Hard)
		}
		// tent sets one value as both limits: the soft one, so that
		// nothing can raise it.
		b.Spec.Limits.NoFile = rl.Soft
	}
	if cfg.Hostname != "" {
		b.Spec.Hostname = cfg.Hostname
	}
	if h := cfg.Hooks; h != nil {
		//lint:ignore SA1019 deprecated, but bundles still carry prestart hooks (docker's)
		n := len(h.Prestart)
		if n+len(h.CreateRuntime)+len(h.CreateContainer)+len(h.StartContainer)+len(h.Poststart)+len(h.Poststop) > 0 {
			return nil, unsupported("hooks", "tent-runc runs no hooks")
		}
	}

	for i, m := range cfg.Mounts {
		field := fmt.Sprintf("mounts[%d] (%s)", i, m.Destination)
		dst := filepath.Clean(m.Destination)
		if !filepath.IsAbs(m.Destination) {
			return nil, invalid(field, "destination must be absolute")
		}
		if slices.Contains(tentOwned, dst) || underTentOwned(dst) {
			// Beneath /dev, /proc or /sys (kubelet's /dev/termination-log,
			// for one) there is nothing of the bundle's: those are tent's.
			b.Ignored = append(b.Ignored, field+": tent's own")
			continue
		}
		bind := m.Type == "bind" || slices.Contains(m.Options, "bind") || slices.Contains(m.Options, "rbind")
		switch {
		case bind:
			src := m.Source
			if !filepath.IsAbs(src) {
				src = filepath.Join(dir, src)
			}
			access := sandbox.ReadWrite
			if slices.Contains(m.Options, "ro") || slices.Contains(m.Options, "rro") {
				// Recursively, submounts included: "ro" is met with
				// runc's "rro", stricter.
				access = sandbox.ReadOnly
			}
			slave := false
			for _, o := range m.Options {
				switch o {
				case "slave", "rslave":
					// Kubernetes' HostToContainer: the host's new mounts
					// beneath the source appear inside (recursively).
					slave = true
				case "shared", "rshared":
					return nil, unsupported(field, "%s propagation: a container's mounts never reach the host (rslave and private binds are supported)", o)
				}
			}
			b.Spec.Mounts = append(b.Spec.Mounts, sandbox.Mount{Source: filepath.Clean(src), Target: dst, Access: access, Slave: slave})
		case m.Type == "tmpfs":
			b.Spec.Tmpfs = append(b.Spec.Tmpfs, dst)
		default:
			return nil, unsupported(field, "type %q: tent mounts binds and tmpfs (proc, /dev and /sys are its own)", m.Type)
		}
	}

	l := cfg.Linux
	if l == nil {
		l = &specs.Linux{}
	}
	if err := convertLinux(b, l, invalid, unsupported); err != nil {
		return nil, err
	}
	for i, m := range cfg.Mounts {
		// A mount's own idmapping (a user-namespaced pod's volumes) must
		// be the container's: tent idmaps every mount with its range.
		if len(m.UIDMappings)+len(m.GIDMappings) == 0 {
			continue
		}
		var want []specs.LinuxIDMapping
		if r := b.Spec.IDRange; r != nil {
			want = []specs.LinuxIDMapping{{ContainerID: 0, HostID: r.Host, Size: r.Size}}
		}
		if want == nil || !slices.Equal(m.UIDMappings, want) || !slices.Equal(m.GIDMappings, want) {
			return nil, unsupported(fmt.Sprintf("mounts[%d] (%s).uidMappings", i, m.Destination), "tent idmaps every mount with the container's own range (linux.uidMappings)")
		}
	}
	if b.Spec.Hostname == "" && b.joinsUTS {
		// A pod's container: CRI sets the pod's hostname on its first
		// container only, and binds a file of it at /etc/hostname into
		// every container; tent gives each its own uts namespace, with
		// that name.
		b.Spec.Hostname = hostnameFromMounts(b.Spec.Mounts)
	}
	return b, nil
}

// convertProcess checks an OCI process (the main one, or one of exec).
func convertProcess(p *specs.Process, field string) (*process, error) {
	if len(p.Args) == 0 || p.Args[0] == "" {
		return nil, fmt.Errorf("%w: %s.args: empty", sandbox.ErrInvalidSpec, field)
	}
	if p.CommandLine != "" {
		return nil, fmt.Errorf("%w: %s.commandLine: Windows only", ErrUnsupportedConfig, field)
	}
	cwd := p.Cwd
	if cwd == "" {
		cwd = "/"
	}
	if !filepath.IsAbs(cwd) {
		return nil, fmt.Errorf("%w: %s.cwd %q: must be absolute", sandbox.ErrInvalidSpec, field, p.Cwd)
	}
	for i, kv := range p.Env {
		if k, _, ok := strings.Cut(kv, "="); !ok || k == "" {
			return nil, fmt.Errorf("%w: %s.env[%d]: %q is not KEY=VALUE", sandbox.ErrInvalidSpec, field, i, kv)
		}
	}
	if p.User.Username != "" {
		return nil, fmt.Errorf("%w: %s.user.username: Windows only; give uid and gid", ErrUnsupportedConfig, field)
	}
	var groups []uint32
	for _, g := range p.User.AdditionalGids {
		if g != p.User.GID && !slices.Contains(groups, g) {
			groups = append(groups, g)
		}
	}
	var set, ambient []string
	if c := p.Capabilities; c != nil {
		set, ambient = c.Permitted, c.Ambient
		if len(set) == 0 {
			set = c.Effective
		}
	}
	caps, dropped := grantedCaps(set)
	amb, _ := grantedCaps(ambient)
	amb = slices.DeleteFunc(amb, func(n string) bool { return !slices.Contains(caps, n) })
	return &process{Args: p.Args, Env: p.Env, Cwd: filepath.Clean(cwd), Terminal: p.Terminal, UID: p.User.UID, GID: p.User.GID, Groups: groups, Caps: caps, Ambient: amb, dropped: dropped}, nil
}

// grantedCaps splits an OCI process's capability set into those tent
// grants in a sandbox (sandbox.Grantable) and the others. Never nil: a
// process with none asks for none.
func grantedCaps(set []string) (granted, dropped []string) {
	granted = []string{}
	for _, n := range set {
		if sandbox.Grantable(n) {
			if !slices.Contains(granted, n) {
				granted = append(granted, n)
			}
		} else if !slices.Contains(dropped, n) {
			dropped = append(dropped, n)
		}
	}
	return granted, dropped
}

// convertLinux reads linux.*: namespaces, resources, seccomp, masked and
// read-only paths, sysctls.
func convertLinux(b *bundle, l *specs.Linux, invalid, unsupported func(field, format string, a ...any) error) error {
	net := false
	for i, ns := range l.Namespaces {
		field := fmt.Sprintf("linux.namespaces[%d] (%s)", i, ns.Type)
		if ns.Path != "" {
			switch ns.Type {
			case specs.NetworkNamespace:
				if !filepath.IsAbs(ns.Path) {
					return invalid(field+".path", "%q is not absolute", ns.Path)
				}
				b.NetNS = filepath.Clean(ns.Path)
			case specs.UserNamespace:
				// A user-namespaced pod's (containerd 2 makes it, with
				// the pod's range): the container gets a namespace of
				// its own with the same range (linux.uidMappings, which
				// the bundle must give), so the same host ids.
				if len(l.UIDMappings) == 0 {
					return unsupported(field+".path", "joining an existing user namespace (%s) without linux.uidMappings: tent makes the container's own, and needs the range to map", ns.Path)
				}
				b.Ignored = append(b.Ignored, field+".path "+ns.Path+" (the container gets its own, with the same linux.uidMappings)")
			case specs.IPCNamespace:
				// A pod's (CRI names it by /proc/PID/ns/ipc of the pod's
				// sandbox container's pid, its tent init): joined, so
				// that a pod's containers share System V IPC and POSIX
				// message queues. tent-runc checks, as it joins, that it
				// is an IPC namespace of a container, never the host's.
				if !filepath.IsAbs(ns.Path) {
					return invalid(field+".path", "%q is not absolute", ns.Path)
				}
				b.IPCNS = filepath.Clean(ns.Path)
			case specs.PIDNamespace:
				// A pod's, with shareProcessNamespace (CRI names it by
				// /proc/PID/ns/pid of the pod's sandbox container's pid,
				// its tent init): the container's init is cloned into
				// it. tent-runc checks, as it opens it, that it is a pid
				// namespace of a container, never the host's.
				if !filepath.IsAbs(ns.Path) {
					return invalid(field+".path", "%q is not absolute", ns.Path)
				}
				b.PIDNS = filepath.Clean(ns.Path)
			case specs.UTSNamespace:
				b.joinsUTS = true
				// A pod's: the container gets its own instead, with the
				// pod's hostname.
				b.Ignored = append(b.Ignored, field+".path "+ns.Path+" (the container gets its own)")
			default:
				return unsupported(field+".path", "joining an existing %s namespace (%s) is not supported: tent makes each sandbox's own (a network namespace can be joined)", ns.Type, ns.Path)
			}
		}
		switch ns.Type {
		case specs.NetworkNamespace:
			net = ns.Path == "" // a path is joined: the sandbox shares it
		case specs.PIDNamespace, specs.IPCNamespace, specs.UTSNamespace, specs.MountNamespace, specs.UserNamespace, specs.CgroupNamespace:
		case specs.TimeNamespace:
			return unsupported(field, "time namespaces are not supported")
		default:
			return invalid(field, "unknown namespace type")
		}
	}
	if !net {
		// No new network namespace asked: the host's network, as runc
		// gives, or the one joined (the supervisor runs in it).
		b.Spec.Network.Mode = "host"
	}
	// tent always makes its own pid, ipc, uts, mount, user and cgroup
	// namespaces: asking for fewer is met with more isolation.
	if err := convertIDMappings(b, l, unsupported); err != nil {
		return err
	}
	if len(l.Sysctl) > 0 {
		keys := make([]string, 0, len(l.Sysctl))
		for k := range l.Sysctl {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			if !validSysctl(k) {
				return invalid("linux.sysctl", "%q is not a sysctl name", k)
			}
			// Network sysctls of a namespace joined by path (a pod's) are
			// set there, before the sandbox starts, by the runtime; the
			// others are the sandbox's own namespaces' (IPC, its own
			// network), which it sets itself and checks (sandbox.Spec's
			// Sysctls: the host's never).
			if strings.HasPrefix(k, "net.") && b.NetNS != "" {
				if b.Sysctls == nil {
					b.Sysctls = map[string]string{}
				}
				b.Sysctls[k] = l.Sysctl[k]
				continue
			}
			if !strings.HasPrefix(k, "net.") && b.IPCNS != "" {
				// The pod's, in the pod's IPC namespace the container
				// joins: its sandbox container set them there.
				if b.IPCSysctls == nil {
					b.IPCSysctls = map[string]string{}
				}
				b.IPCSysctls[k] = l.Sysctl[k]
				continue
			}
			if !strings.HasPrefix(k, "net.") && podSandbox(b.Config.Annotations) {
				// A pod's sysctls come in its sandbox container's bundle,
				// for the pod's IPC namespace; tent gives every container
				// an IPC namespace of its own, and sets them in each.
				if b.PodSysctls == nil {
					b.PodSysctls = map[string]string{}
				}
				b.PodSysctls[k] = l.Sysctl[k]
			}
			if b.Spec.Sysctls == nil {
				b.Spec.Sysctls = map[string]string{}
			}
			b.Spec.Sysctls[k] = l.Sysctl[k]
		}
		if err := sandbox.ValidateSysctls(b.Spec.Sysctls, b.Spec.Network); err != nil {
			return unsupported("linux.sysctl", "%v", err)
		}
		if err := sandbox.ValidateSysctls(b.IPCSysctls, b.Spec.Network); err != nil {
			return unsupported("linux.sysctl", "%v", err)
		}
	}
	if r := l.Resources; r != nil {
		lim := limitsOf(r)
		b.Spec.Limits.Memory, b.Spec.Limits.Pids, b.Spec.Limits.CPUs = lim.Memory, lim.Pids, lim.CPUs
	}
	if s := l.Seccomp; s != nil {
		if s.ListenerPath != "" {
			return unsupported("linux.seccomp.listenerPath", "seccomp user notification is not supported")
		}
		data, err := json.Marshal(s)
		if err != nil {
			return invalid("linux.seccomp", "%v", err)
		}
		if b.Spec.Seccomp, err = policy.ParseSeccomp(data); err != nil {
			return fmt.Errorf("%w: linux.seccomp: %w", sandbox.ErrInvalidSpec, err)
		}
		// In addition to tent's own filter, never instead of it: a
		// pod's RuntimeDefault or Localhost profile narrows what the
		// container may do, and tent's refusals (set-id modes, new user
		// namespaces, ...) stay.
		b.Spec.Seccomp.KeepDefault = true
	}
	switch l.RootfsPropagation {
	case "", "private", "rprivate", "slave", "rslave":
		// The root is the container's own (a private clone): a slave
		// root would take nothing from the host that its rslave binds
		// (mounts[].options) do not.
	default:
		return unsupported("linux.rootfsPropagation", "%q: a container's mounts never reach the host (private and rslave are supported)", l.RootfsPropagation)
	}
	for i, d := range l.Devices {
		return unsupported(fmt.Sprintf("linux.devices[%d] (%s)", i, d.Path), "tent's /dev holds null, zero, full, random, urandom, tty and a private pts only")
	}
	b.Spec.MaskedPaths = append(b.Spec.MaskedPaths, l.MaskedPaths...)
	b.Spec.ReadOnlyPaths = append(b.Spec.ReadOnlyPaths, l.ReadonlyPaths...)
	return nil
}

// limitsOf maps linux.resources onto tent's limits: memory limit, pids
// limit, CPU quota/period (0 where it sets none). Weights and shares
// (relative, not limits) are left to the host's scheduler.
func limitsOf(r *specs.LinuxResources) sandbox.Limits {
	var l sandbox.Limits
	if m := r.Memory; m != nil && m.Limit != nil && *m.Limit > 0 {
		l.Memory = *m.Limit
	}
	if p := r.Pids; p != nil && p.Limit > 0 {
		l.Pids = p.Limit
	}
	if c := r.CPU; c != nil && c.Quota != nil && *c.Quota > 0 {
		period := uint64(100000)
		if c.Period != nil && *c.Period > 0 {
			period = *c.Period
		}
		l.CPUs = float64(*c.Quota) / float64(period)
	}
	return l
}

// hostnameFromMounts reads the host name in the source of a bind at
// /etc/hostname (a small file containerd writes), or "" when there is
// none or it is not a valid name.
func hostnameFromMounts(mounts []sandbox.Mount) string {
	for _, m := range mounts {
		if m.Target != "/etc/hostname" {
			continue
		}
		f, err := os.Open(m.Source)
		if err != nil {
			return ""
		}
		defer f.Close()
		buf := make([]byte, 256)
		n, _ := f.Read(buf)
		name := strings.TrimSpace(string(buf[:n]))
		if name == "" || len(name) > 63 || strings.ContainsAny(name, " /\x00\n") {
			return ""
		}
		return name
	}
	return ""
}

// podSandbox reports whether annotations mark a CRI pod's sandbox
// container (containerd's and CRI-O's keys).
func podSandbox(annotations map[string]string) bool {
	return annotations["io.kubernetes.cri.container-type"] == "sandbox" || annotations["io.kubernetes.cri-o.ContainerType"] == "sandbox"
}

// validSysctl accepts dotted names of lower-case letters, digits, '_'
// and '-' (no '/', no empty or ".." element).
func validSysctl(k string) bool {
	for _, elem := range strings.Split(k, ".") {
		if elem == "" {
			return false
		}
		for i := 0; i < len(elem); i++ {
			c := elem[i]
			if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '_' || c == '-') {
				return false
			}
		}
	}
	return true
}

// convertIDMappings sets the container's id range: the bundle's
// linux.uidMappings and gidMappings (one range each, from container id
// 0, the same host ids and size for both), else DefaultIDRange. A
// non-root tent-runc maps one id, as tent does for an unprivileged
// caller (its mappings are then refused).
func convertIDMappings(b *bundle, l *specs.Linux, unsupported func(field, format string, a ...any) error) error {
	if os.Geteuid() != 0 {
		if len(l.UIDMappings) > 0 || len(l.GIDMappings) > 0 {
			return unsupported("linux.uidMappings", "a non-root tent-runc maps one id, the caller's")
		}
		b.Spec.User.Groups = nil
		if p := b.Config.Process; p != nil && len(p.User.AdditionalGids) > 0 {
			b.Ignored = append(b.Ignored, "process.user.additionalGids (a non-root tent-runc maps one id)")
		}
		return nil
	}
	r := DefaultIDRange
	if len(l.UIDMappings)+len(l.GIDMappings) > 0 {
		if len(l.UIDMappings) != 1 || len(l.GIDMappings) != 1 {
			return unsupported("linux.uidMappings", "tent maps one range of ids (%d uid and %d gid mappings given)", len(l.UIDMappings), len(l.GIDMappings))
		}
		u, g := l.UIDMappings[0], l.GIDMappings[0]
		if u != g {
			return unsupported("linux.gidMappings", "%+v differs from linux.uidMappings %+v: tent maps uids and gids alike", g, u)
		}
		if u.ContainerID != 0 {
			return unsupported("linux.uidMappings[0].containerID", "%d: tent's range starts at container id 0", u.ContainerID)
		}
		r = sandbox.IDRange{Host: u.HostID, Size: u.Size}
	}
	b.Spec.IDRange = &r
	return nil
}
