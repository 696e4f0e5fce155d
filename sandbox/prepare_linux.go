package sandbox

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/seccomp"
)

// unprivilegedHostID is the host uid and gid a root caller's sandbox runs
// as: never host root.
const unprivilegedHostID = 65534

// plan is a validated spec turned into what the host and the init do.
type plan struct {
	cfg        namespaces.Config
	opts       namespaces.Options
	privileged bool
	uid, gid   uint32
	userMounts []fs.Mount
	root       *fs.Mount // Spec.Root, opened after userMounts (nil without)
	// defaultSeccomp is true when commands run tent's default seccomp
	// profile, which refuses set-id modes.
	defaultSeccomp bool
	limits         cgroups.Limits
	network        *netpolicy.Compiled // limited mode only
	cowRoot        string              // host directory of the cow layers ("" without cow mounts)
	// ca is the proxy's CA when the policy has secrets or HTTP rules, and
	// caDir the host directory of its certificate, mounted at caTarget.
	ca      *netpolicy.CA
	caDir   string
	layers  []CowLayer
	report  Report
	missing []Missing
}

// validName accepts host and user names: a letter or digit, then up to 62
// letters, digits, dots, dashes or underscores. (A hand-written check: a
// package-level regexp would be compiled by every sandbox init at start.)
func validName(s string) bool {
	if len(s) == 0 || len(s) > 63 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		alnum := c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9'
		if !alnum && (i == 0 || c != '.' && c != '-' && c != '_') {
			return false
		}
	}
	return true
}

// validate checks the parts of a spec that need no host access.
func validate(s *Spec) error {
	l := s.Limits
	switch {
	case l.Memory < 0:
		return fmt.Errorf("limits.memory: %d is negative", l.Memory)
	case l.Memory > 0 && l.Memory < 1<<20:
		return fmt.Errorf("limits.memory: %d bytes is below the 1 MiB minimum", l.Memory)
	case l.Pids < 0:
		return fmt.Errorf("limits.pids: %d is negative", l.Pids)
	case l.CPUs < 0 || math.IsNaN(l.CPUs) || math.IsInf(l.CPUs, 0):
		return fmt.Errorf("limits.cpus: %v is not a positive number", l.CPUs)
	case l.CPUs > 0 && l.CPUs < 0.01:
		return fmt.Errorf("limits.cpus: %v is below the 0.01 minimum", l.CPUs)
	case l.Timeout < 0:
		return fmt.Errorf("limits.timeout: %s is negative", l.Timeout)
	}
	if s.User != nil && s.User.Name != "" && !validName(s.User.Name) {
		return fmt.Errorf("user.name: %q is not a valid user name", s.User.Name)
	}
	if s.Hostname != "" && !validName(s.Hostname) {
		return fmt.Errorf("hostname: %q is not a valid host name", s.Hostname)
	}
	if s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir) {
		return fmt.Errorf("workdir: %q must be an absolute, clean path inside the sandbox", s.Workdir)
	}
	if err := s.Network.Validate(); err != nil {
		return fmt.Errorf("network: %w", err)
	}
	if err := validatePorts(s); err != nil {
		return err
	}
	if err := ValidateSysctls(s.Sysctls, s.Network); err != nil {
		return err
	}
	if s.Sudo {
		if t, ok := sudoConflict(s); ok {
			return fmt.Errorf("sudo: %s is mounted at or above tent's sudo (%s, %s): move that mount or leave sudo off", t, namespaces.SudoDir, namespaces.SudoPathDir)
		}
	}
	for i, kv := range s.Env {
		if k, _, ok := cutEnv(kv); !ok || k == "" {
			return fmt.Errorf("env %d: %q is not KEY=VALUE", i+1, kv)
		}
	}
	if s.Root != nil {
		if s.WritableRoot {
			return errors.New("writable_root: a spec with a root directory (root) decides its own writability (root.readonly)")
		}
		if s.Sudo {
			return errors.New("sudo: tent's sudo needs tent's own root filesystem, not a root directory (root)")
		}
		if err := fs.ValidateRoot(*s.Root.mount()); err != nil {
			return err
		}
		fi, err := os.Stat(s.Root.Path)
		if err != nil {
			return fmt.Errorf("root: %w", err)
		}
		if !fi.IsDir() {
			return fmt.Errorf("root: %s is not a directory", s.Root.Path)
		}
	}
	return fs.Validate(s.Mounts, fs.StatSource)
}

// sudoConflict reports the first target of s's mounts or tmpfs that
// lies at, above or beneath namespaces.SudoDir, or at or above
// namespaces.SudoPathDir, where Spec.Sudo puts its own mounts.
func sudoConflict(s *Spec) (string, bool) {
	near := func(t, p string) bool { return t == p || strings.HasPrefix(p, t+"/") }
	targets := append([]string{}, s.Tmpfs...)
	for _, m := range s.Mounts {
		targets = append(targets, m.Target)
	}
	for _, t := range targets {
		if near(t, namespaces.SudoDir) || strings.HasPrefix(t, namespaces.SudoDir+"/") || near(t, namespaces.SudoPathDir) {
			return t, true
		}
	}
	return "", false
}

// validatePorts checks s.Ports: each mapping, no host address and port
// twice, and a network namespace of the sandbox's own to dial into.
func validatePorts(s *Spec) error {
	if len(s.Ports) == 0 {
		return nil
	}
	if s.Network.Mode.Normalize() == netpolicy.Host {
		return errors.New("ports: a sandbox on the host's network has the host's ports already: publish ports of a sandbox with mode none or limited")
	}
	seen := map[string]bool{}
	for i, m := range s.Ports {
		if err := m.validate(); err != nil {
			return fmt.Errorf("ports %d: %w", i+1, err)
		}
		key := m.String()[strings.Index(m.String(), "-> ")+3:]
		if m.HostPort != 0 && seen[key] {
			return fmt.Errorf("ports %d: host address %s is published twice", i+1, key)
		}
		seen[key] = true
	}
	return nil
}

func cutEnv(kv string) (string, string, bool) {
	for i := 0; i < len(kv); i++ {
		if kv[i] == '=' {
			return kv[:i], kv[i+1:], true
		}
	}
	return kv, "", false
}

var defaultProgram = sync.OnceValues(func() ([]byte, error) {
	p, err := seccomp.DefaultProgram()
	if err != nil {
		return nil, err
	}
	return p.Marshal(), nil
})

var cgroupHost = sync.OnceValues(func() (*cgroups.Host, error) { return cgroups.Detect("/proc") })

// prepare validates s and resolves it against this host.
func prepare(s *Spec, name string, args []string) (*plan, error) {
	if err := validate(s); err != nil {
		return nil, invalid(err)
	}
	if name != "" && len(s.Ports) > 0 {
		return nil, invalid(errors.New("ports: published ports need a long-lived sandbox (Provision, tent create): a one-shot command's init answers no connections"))
	}
	p := &plan{privileged: os.Geteuid() == 0}
	p.uid, p.gid = uint32(os.Getuid()), uint32(os.Getgid())
	hostUID, hostGID := int(p.uid), int(p.gid)
	if p.privileged {
		p.uid, p.gid = 0, 0
		hostUID, hostGID = unprivilegedHostID, unprivilegedHostID
	}
	if s.User != nil {
		p.uid, p.gid = s.User.UID, s.User.GID
	}
	if k, ok := ipcSysctl(s.Sysctls); ok && p.uid != 0 {
		// The kernel lets only the IPC namespace's root (uid 0 of its
		// user namespace) write its sysctls, and the sandbox maps one id:
		// the spec contradicts itself, on any host.
		return nil, invalid(fmt.Errorf("sysctls: %s: only the root of the sandbox's IPC namespace may set its sysctls, and the sandbox maps one id, its user's (uid %d): run it as uid 0 inside (user, tent --user 0) or leave the IPC sysctls out (net.* ones need no root)", k, p.uid))
	}
	p.opts.UIDMap = syscall.SysProcIDMap{ContainerID: int(p.uid), HostID: hostUID, Size: 1}
	p.opts.GIDMap = syscall.SysProcIDMap{ContainerID: int(p.gid), HostID: hostGID, Size: 1}
	p.opts.Privileged = p.privileged
	p.opts.ShareNet = s.Network.Mode == netpolicy.Host
	p.opts.CgroupFD = -1

	home, user := "/root", "root"
	if p.uid != 0 {
		user = os.Getenv("USER")
		if user == "" || !validName(user) || p.uid != uint32(os.Getuid()) {
			user = fmt.Sprintf("user%d", p.uid)
		}
		home = "/home/" + user
	}
	if s.User != nil && s.User.Name != "" {
		user, home = s.User.Name, "/home/"+s.User.Name
	}

	all, guarded, partial, err := withGitGuards(s.Mounts, s.GitWritable, s.Mounts)
	if err != nil {
		return nil, invalid(err)
	}
	var netEnv []string
	if len(s.Network.Secrets) > 0 && s.Network.Mode != netpolicy.Limited {
		return nil, invalid(errors.New("network: secrets need --net limited: the proxy of limited mode adds them"))
	}
	if s.Network.Mode == netpolicy.Limited {
		if p.network, err = netpolicy.Compile(s.Network); err != nil {
			return nil, invalid(fmt.Errorf("network: %w", err))
		}
		netEnv = proxyEnv(namespaces.ProxyHTTPPort, namespaces.ProxySOCKSPort)
		if n := len(catchPorts(p.network)); n > maxCatchPorts {
			return nil, invalid(fmt.Errorf("network: the allowed hosts name %d ports; at most %d can be caught for programs that ignore the proxy", n, maxCatchPorts))
		}
		if p.network.NeedsInterception() {
			secretEnv, err := secretsEnv(p.network.Secrets(), s.Env)
			if err != nil {
				return nil, invalid(err)
			}
			if p.ca, err = netpolicy.NewCA("sandbox"); err != nil {
				return nil, err
			}
			p.caDir = filepath.Join(os.TempDir(), "tent-ca-"+randomID())
			all = append(all, fs.Mount{Source: p.caDir, Target: caTarget, Access: fs.ReadOnly})
			netEnv = append(append(netEnv, caEnv()...), secretEnv...)
		}
	}
	planInput := fs.PlanInput{Mounts: all, System: probeSystem(), Home: home, PreOpened: p.privileged}
	planInput.Tmpfs, planInput.Masked, planInput.ReadOnly = s.Tmpfs, s.MaskedPaths, s.ReadOnlyPaths
	planInput.WritableRoot = s.WritableRoot
	if s.Sudo {
		exe, err := os.Executable()
		if err != nil {
			return nil, fmt.Errorf("sudo: finding tent's binary to bind: %w", err)
		}
		// The binary, read-only beside the init's socket, in a tmpfs the
		// command cannot write; the symlink sudo in a read-only tmpfs,
		// joined to /usr/local/bin (see namespaces.SudoDir).
		all = append(all, fs.Mount{Source: exe, Target: namespaces.SudoBinary, Access: fs.ReadOnly})
		planInput.Mounts = all
		planInput.Private = []fs.Step{
			{Kind: fs.KindTmpfs, Target: namespaces.SudoDir, Mode: 0o755, FD: -1},
			{Kind: fs.KindTmpfs, Target: namespaces.SudoBinDir, Mode: 0o755, ReadOnly: true, FD: -1},
			{Kind: fs.KindSymlink, Target: namespaces.SudoBinDir + "/sudo", LinkTo: namespaces.SudoBinary, FD: -1},
			{Kind: fs.KindUnion, Target: namespaces.SudoPathDir, Lowers: []string{namespaces.SudoBinDir, namespaces.SudoPathDir}, Optional: true, FD: -1},
		}
	}
	if s.Root != nil {
		p.root = s.Root.mount()
		planInput.Root, planInput.System = p.root, nil
	}
	for i, m := range s.Mounts {
		if m.Access != fs.CopyOnWrite {
			continue
		}
		if p.cowRoot == "" {
			p.cowRoot = filepath.Join(os.TempDir(), "tent-cow-"+randomID())
			planInput.Layers = map[int]fs.Layer{}
		}
		dir := filepath.Join(p.cowRoot, strconv.Itoa(i))
		planInput.Layers[i] = fs.Layer{Upper: filepath.Join(dir, "upper"), Work: filepath.Join(dir, "work")}
		p.layers = append(p.layers, CowLayer{Source: m.Source, Target: m.Target, Upper: filepath.Join(dir, "upper")})
	}
	mounts, err := fs.NewPlan(planInput)
	if err != nil {
		return nil, invalid(err)
	}
	p.userMounts = all

	workdir := s.Workdir
	if workdir == "" {
		workdir = "/"
		if cwd, err := os.Getwd(); err == nil {
			if inside, ok := mounts.InsidePath(cwd); ok {
				workdir = inside
			}
		}
	}
	hostname := s.Hostname
	if hostname == "" {
		hostname = DefaultHostname
	}
	p.cfg = namespaces.Config{
		Plan:     mounts,
		Hostname: hostname,
		Sysctls:  s.Sysctls,
		Sudo:     s.Sudo,
		Loopback: !p.opts.ShareNet,
		// Limited: listeners inside, handed to the host-side proxy.
		ProxyListeners: p.network != nil,
		// ...and every connection to the ports the rules name caught
		// for it, with a stub DNS (netpolicy.Proxy.ServeTransparent).
		Transparent: p.network != nil,
		CatchPorts:  catchPorts(p.network),
		// A long-lived sandbox of an unprivileged caller keeps the host's
		// view, so that Sandbox.Mount can open new mounts' sources.
		HostView: name == "" && !p.privileged,
		Exec: namespaces.Exec{
			Path: name,
			Args: append([]string{name}, args...),
			Env:  buildEnv(s.EnvInherit, netEnv, s.Env, home, user, os.Environ(), secretValues(s.Network.Secrets)),
			Dir:  workdir,
		},
	}

	r := &p.report
	r.Tier = TierFull
	r.Timeout, r.MemoryLimit = s.Limits.Timeout, s.Limits.Memory
	for _, ns := range []string{"user", "mount", "pid", "ipc", "uts", "cgroup"} {
		r.add(ns+" namespace", Enforced, "")
	}
	switch {
	case p.opts.ShareNet:
		r.add("network namespace", Absent, "--net host shares the host's network")
	case p.network != nil:
		r.add("network namespace", Enforced, fmt.Sprintf("limited: loopback only, allowed hosts through tent's proxy (%d allow, %d deny rules; caught without a proxy on ports %s)", len(s.Network.AllowedHosts), len(s.Network.DeniedHosts), portList(p.cfg.CatchPorts)))
	default:
		r.add("network namespace", Enforced, "loopback only")
	}
	if p.ca != nil {
		r.add("secrets and HTTP rules", Enforced, fmt.Sprintf("%d secrets as placeholders, added by the proxy for their hosts only; TLS intercepted for the hosts of secrets and HTTP rules (proxy CA at %s/ca.pem)", len(s.Network.Secrets), caTarget))
	}
	switch {
	case s.Root == nil:
		r.add("root filesystem", Enforced, "tmpfs root, system directories read-only")
	case s.Root.ReadOnly:
		r.add("root filesystem", Enforced, s.Root.Path+", read-only, nosuid, nodev")
	default:
		r.add("root filesystem", Enforced, s.Root.Path+", writable, nosuid, nodev")
	}
	r.add("no_new_privs", Enforced, "")
	r.add("capabilities", Enforced, "all sets empty")
	switch {
	case len(partial) > 0:
		r.add("git control files", Degraded, fmt.Sprintf("read-only in %d git directories; the search of %s stopped at its bound (4096 entries, 128 git directories): repositories beyond it are writable", guarded, strings.Join(partial, ", ")))
	case guarded > 0:
		r.add("git control files", Enforced, fmt.Sprintf("read-only in %d git directories of the rw mounts (hooks, config)", guarded))
	}

	if err := p.resolveSeccomp(s); err != nil {
		return nil, err
	}
	p.resolveLandlock()
	p.resolveLimits(s.Limits)
	if len(p.missing) > 0 && !s.BestEffort {
		return nil, &UnsupportedError{Missing: p.missing, Degradable: true}
	}
	return p, nil
}

func (p *plan) resolveSeccomp(s *Spec) error {
	switch {
	case s.Seccomp.Unconfined:
		p.report.add("seccomp", Absent, "unconfined by request")
		p.cfg.ReuseThread = true
		return nil
	case s.Seccomp.Profile != nil:
		prog, err := seccomp.Compile(s.Seccomp.Profile)
		if errors.Is(err, errors.ErrUnsupported) { // built without cgo
			return fmt.Errorf("%w: seccomp profile: %w", ErrUnsupported, err)
		}
		if err != nil {
			return invalid(fmt.Errorf("seccomp profile: %w", err))
		}
		p.cfg.Seccomp = prog.Marshal()
		p.report.add("seccomp", Enforced, "custom profile")
		return nil
	}
	prog, err := defaultProgram()
	if err != nil {
		return fmt.Errorf("compiling the default seccomp profile: %w", err)
	}
	p.cfg.Seccomp = prog
	p.cfg.ReuseThread = true
	p.defaultSeccomp = true
	p.report.add("seccomp", Enforced, "default profile")
	return nil
}

func (p *plan) resolveLandlock() {
	abi, err := fs.LandlockABI()
	if err != nil || abi < 1 {
		p.missing = append(p.missing, Missing{Protection: "landlock", Reason: fmt.Sprint(err),
			Fix: "use Linux 5.13 or later with Landlock enabled (CONFIG_SECURITY_LANDLOCK=y, landlock in lsm=)"})
		p.report.add("landlock", Absent, fmt.Sprint(err))
		return
	}
	abi = min(abi, fs.MaxLandlockABI)
	p.cfg.LandlockABI = abi
	p.cfg.LandlockRules = fs.LandlockRules(p.cfg.Plan)
	p.report.LandlockABI = abi
	if abi < 6 {
		p.report.add("landlock", Degraded, fmt.Sprintf("ABI %d: no scoping of abstract unix sockets and signals (needs ABI 6, Linux 6.12)", abi))
		return
	}
	p.report.add("landlock", Enforced, fmt.Sprintf("ABI %d", abi))
}

// resolveLimits records which limits need a cgroup; the cgroup itself is
// created by Start. nofile is always an rlimit.
func (p *plan) resolveLimits(l Limits) {
	// A long-lived sandbox (no command yet) outlives a command the OOM
	// killer takes: the killer picks that process, not the whole group.
	p.limits = cgroups.Limits{Memory: l.Memory, Pids: l.Pids, CPUs: l.CPUs, PerProcessOOM: p.cfg.Exec.Path == ""}
	if l.NoFile > 0 {
		p.cfg.Rlimits = append(p.cfg.Rlimits, namespaces.Rlimit{Resource: unix.RLIMIT_NOFILE, Cur: l.NoFile, Max: l.NoFile})
		p.report.add("nofile", Enforced, fmt.Sprintf("RLIMIT_NOFILE %d", l.NoFile))
	}
	if l.Timeout > 0 {
		p.report.add("timeout", Enforced, l.Timeout.String())
	}
}

// wantsCgroupLimits reports whether any limit needs a cgroup.
func (p *plan) wantsCgroupLimits() bool {
	return p.limits.Memory > 0 || p.limits.Pids > 0 || p.limits.CPUs > 0
}

// degradeToRlimits replaces cgroup limits with rlimits (best effort).
func (p *plan) degradeToRlimits(why error) {
	l := p.limits
	fix := "run as root, or under a delegated cgroup v2 subtree (systemd-run --user --scope -p Delegate=yes tent ...)"
	if l.Memory > 0 {
		p.cfg.Rlimits = append(p.cfg.Rlimits, namespaces.Rlimit{Resource: unix.RLIMIT_AS, Cur: uint64(l.Memory), Max: uint64(l.Memory)})
		p.missing = append(p.missing, Missing{Protection: "memory", Reason: "no writable cgroup: " + why.Error(), Fix: fix})
		p.report.add("memory", Degraded, "RLIMIT_AS (address space, per process): "+why.Error())
	}
	if l.Pids > 0 {
		p.cfg.Rlimits = append(p.cfg.Rlimits, namespaces.Rlimit{Resource: unix.RLIMIT_NPROC, Cur: uint64(l.Pids), Max: uint64(l.Pids)})
		p.missing = append(p.missing, Missing{Protection: "pids", Reason: "no writable cgroup: " + why.Error(), Fix: fix})
		p.report.add("pids", Degraded, "RLIMIT_NPROC (per user): "+why.Error())
	}
	if l.CPUs > 0 {
		p.missing = append(p.missing, Missing{Protection: "cpus", Reason: "no writable cgroup: " + why.Error(), Fix: fix})
		p.report.add("cpus", Absent, why.Error())
	}
}

// reportCgroupLimits is called once the sandbox's cgroup exists
// (p.report.CgroupPaths holds its directories) and before the init gets
// its config: it reports the limits the cgroup enforces and adds the
// sandbox's read-only view of its own cgroup to the mount plan.
func (p *plan) reportCgroupLimits(v cgroups.Version) {
	if host, err := cgroupHost(); err == nil && p.cfg.Plan != nil {
		// A host layout tent cannot mirror leaves the sandbox without
		// the view (no /sys), never without its limits.
		_ = p.cfg.Plan.AddCgroupView(cgroupView(host, v, p.report.CgroupPaths))
	}
	l := p.limits
	if l.Memory > 0 {
		p.report.add("memory", Enforced, fmt.Sprintf("cgroup %s: %d bytes, no swap", v, l.Memory))
	}
	if l.Pids > 0 {
		p.report.add("pids", Enforced, fmt.Sprintf("cgroup %s: %d", v, l.Pids))
	}
	if l.CPUs > 0 {
		p.report.add("cpus", Enforced, fmt.Sprintf("cgroup %s: %.2f cores", v, l.CPUs))
	}
}

// probeSystem finds the host's system directories; merged-usr symlinks
// are recreated as symlinks.
func probeSystem() []fs.SystemEntry {
	var out []fs.SystemEntry
	for _, p := range fs.DefaultSystemPaths {
		fi, err := os.Lstat(p)
		if err != nil {
			continue
		}
		if fi.Mode()&os.ModeSymlink != 0 {
			if to, err := os.Readlink(p); err == nil {
				out = append(out, fs.SystemEntry{Path: p, LinkTo: to})
			}
			continue
		}
		if fi.IsDir() {
			out = append(out, fs.SystemEntry{Path: p})
		}
	}
	return out
}

// cgroupView describes the sandbox's cgroup directories paths (version v)
// for fs.Plan.AddCgroupView: on cgroup v2 its one directory; on cgroup v1
// each hierarchy's directory, named after the host's mount point of that
// hierarchy ("memory", "cpu,cpuacct"), with the host's other controller
// names of a co-mounted hierarchy as links. A v1 path beneath no mount
// point is left out.
func cgroupView(host *cgroups.Host, v cgroups.Version, paths []string) []fs.CgroupDir {
	if v == cgroups.V2 {
		if len(paths) != 1 {
			return nil
		}
		return []fs.CgroupDir{{Source: paths[0]}}
	}
	var dirs []fs.CgroupDir
	for _, dir := range paths {
		mount := ""
		for _, mp := range host.V1Mounts {
			if strings.HasPrefix(dir, mp+"/") && len(mp) > len(mount) {
				mount = mp
			}
		}
		if mount == "" {
			continue
		}
		d := fs.CgroupDir{Source: dir, Name: filepath.Base(mount)}
		for c, mp := range host.V1Mounts {
			if mp == mount && c != d.Name && !strings.Contains(c, "=") {
				d.Links = append(d.Links, c)
			}
		}
		slices.Sort(d.Links)
		dirs = append(dirs, d)
	}
	return dirs
}
