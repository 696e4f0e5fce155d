package sandbox

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
	"github.com/tent-sandbox/tent/seccomp"
)

// unprivilegedHostID is the host uid and gid a root caller's sandbox runs
// as: never host root.
const unprivilegedHostID = 65534

// mapRange maps the sandbox's ids 0 to r.Size-1 onto host ids from
// r.Host, its init running as p.uid and p.gid among them.
func (p *plan) mapRange(r *IDRange) {
	p.idRange = r
	p.opts.UIDMap = syscall.SysProcIDMap{ContainerID: 0, HostID: int(r.Host), Size: int(r.Size)}
	p.opts.GIDMap = p.opts.UIDMap
	p.opts.UID, p.opts.GID = p.uid, p.gid
}

// commandCreds are the ids, groups and capabilities of the sandbox's
// commands (see execUser): nil when they are the init's own.
func (p *plan) commandCreds(u *User) *namespaces.Creds {
	c, _ := execUser(p, u, ExecRequest{}) // no request: nothing to refuse
	return c
}

// hostIDs are the sandbox user's ids on the host.
func (p *plan) hostIDs() (uid, gid int) {
	return p.opts.UIDMap.HostID + int(p.uid) - p.opts.UIDMap.ContainerID, p.opts.GIDMap.HostID + int(p.gid) - p.opts.GIDMap.ContainerID
}

// plan is a validated spec turned into what the host and the init do.
type plan struct {
	cfg        namespaces.Config
	opts       namespaces.Options
	privileged bool
	uid, gid   uint32
	// idRange is Spec.IDRange (a root caller's range of ids), or nil.
	idRange *IDRange
	// caps and ambient are the capabilities commands keep
	// (Spec.Capabilities, Spec.AmbientCapabilities).
	caps, ambient uint64
	userMounts    []fs.Mount
	root          *fs.Mount // Spec.Root, opened after userMounts (nil without)
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

var defaultProgram = sync.OnceValues(func() ([]byte, error) {
	p, err := seccomp.DefaultProgram()
	if err != nil {
		return nil, err
	}
	return p.Marshal(), nil
})

// prepare validates s and resolves it against this host.
func prepare(s *Spec, name string, args []string) (*plan, error) {
	if err := validate(s); err != nil {
		return nil, invalid(err)
	}
	if name != "" && len(s.Ports) > 0 {
		return nil, invalid(errors.New("ports: published ports need a long-lived sandbox (Provision, tent create): a one-shot command's init answers no connections"))
	}
	p := &plan{privileged: os.Geteuid() == 0}
	home, user, err := p.resolveUser(s)
	if err != nil {
		return nil, err
	}
	all, guarded, partial, err := withGitGuards(s.Mounts, s.GitWritable, s.Mounts)
	if err != nil {
		return nil, invalid(err)
	}
	all, netEnv, err := p.resolveNetwork(s, all)
	if err != nil {
		return nil, err
	}
	planInput, err := p.mountInput(s, all, home)
	if err != nil {
		return nil, err
	}
	mounts, err := fs.NewPlan(planInput)
	if err != nil {
		return nil, invalid(err)
	}
	p.userMounts = planInput.Mounts
	p.caps, p.ambient, _ = capabilityMasks(s.Capabilities, s.AmbientCapabilities, "") // validated
	p.resolveConfig(s, mounts, name, args, netEnv, home, user)
	p.reportBase(s, guarded, partial)

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

// resolveUser sets the sandbox's ids and their maps onto the host's, and
// returns its user's home and name.
func (p *plan) resolveUser(s *Spec) (home, user string, err error) {
	p.uid, p.gid = uint32(os.Getuid()), uint32(os.Getgid())
	hostUID, hostGID := int(p.uid), int(p.gid)
	if p.privileged {
		p.uid, p.gid = 0, 0
		hostUID, hostGID = unprivilegedHostID, unprivilegedHostID
	}
	if s.User != nil {
		p.uid, p.gid = s.User.UID, s.User.GID
	}
	if r := s.IDRange; r != nil {
		if !p.privileged {
			return "", "", &UnsupportedError{Missing: []Missing{{Protection: "id_range",
				Reason: "mapping more than one id needs root on the host (CAP_SETUID over the ids mapped)",
				Fix:    "run tent as root, or leave id_range out (the sandbox then maps one id, the caller's)"}}}
		}
		for i, m := range s.Mounts {
			if m.Access == CopyOnWrite {
				return "", "", invalid(fmt.Errorf("mounts[%d] (%s): cow mounts are not supported with id_range", i, m.Target))
			}
		}
		p.mapRange(r)
	}
	if k, ok := ipcSysctl(s.Sysctls); ok && p.uid != 0 && p.idRange == nil {
		// The kernel lets only the IPC namespace's root (uid 0 of its
		// user namespace) write its sysctls, and the sandbox maps one id:
		// the spec contradicts itself, on any host.
		return "", "", invalid(fmt.Errorf("sysctls: %s: only the root of the sandbox's IPC namespace may set its sysctls, and the sandbox maps one id, its user's (uid %d): run it as uid 0 inside (user, tent --user 0) or leave the IPC sysctls out (net.* ones need no root)", k, p.uid))
	}
	if p.idRange == nil {
		p.opts.UIDMap = syscall.SysProcIDMap{ContainerID: int(p.uid), HostID: hostUID, Size: 1}
		p.opts.GIDMap = syscall.SysProcIDMap{ContainerID: int(p.gid), HostID: hostGID, Size: 1}
	}
	p.opts.Privileged = p.privileged
	p.opts.ShareNet = s.Network.Mode == netpolicy.Host
	p.opts.CgroupFD = -1

	home, user = "/root", "root"
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
	return home, user, nil
}

// resolveNetwork compiles a limited network's policy, with the proxy's CA
// when it intercepts TLS (whose directory it adds to the mounts all), and
// returns the mounts and the environment that points commands at the
// proxy.
func (p *plan) resolveNetwork(s *Spec, all []fs.Mount) (_ []fs.Mount, netEnv []string, err error) {
	if len(s.Network.Secrets) > 0 && s.Network.Mode != netpolicy.Limited {
		return nil, nil, invalid(errors.New("network: secrets need --net limited: the proxy of limited mode adds them"))
	}
	if s.Network.Mode != netpolicy.Limited {
		return all, nil, nil
	}
	if p.network, err = netpolicy.Compile(s.Network); err != nil {
		return nil, nil, invalid(fmt.Errorf("network: %w", err))
	}
	// The placeholders Compile made are the sandbox's for good: its
	// record and snapshots keep them, so that a resumed or forked sandbox
	// names its secrets with the same ones (files inside may hold them).
	s.Network.Secrets = slices.Clone(s.Network.Secrets)
	for i, c := range p.network.Secrets() {
		s.Network.Secrets[i].Placeholder = c.Placeholder
	}
	netEnv = proxyEnv(namespaces.ProxyHTTPPort, namespaces.ProxySOCKSPort)
	if n := len(catchPorts(p.network)); n > maxCatchPorts {
		return nil, nil, invalid(fmt.Errorf("network: the allowed hosts name %d ports; at most %d can be caught for programs that ignore the proxy", n, maxCatchPorts))
	}
	if p.network.NeedsInterception() {
		secretEnv, err := secretsEnv(p.network.Secrets(), s.Env)
		if err != nil {
			return nil, nil, invalid(err)
		}
		if p.ca, err = netpolicy.NewCA("sandbox"); err != nil {
			return nil, nil, err
		}
		p.caDir = filepath.Join(os.TempDir(), "tent-ca-"+randomID())
		all = append(all, fs.Mount{Source: p.caDir, Target: caTarget, Access: fs.ReadOnly})
		netEnv = append(append(netEnv, caEnv()...), secretEnv...)
	}
	return all, netEnv, nil
}

// mountInput returns the mount plan's input: the mounts all, the host's
// system directories or s's root, tent's sudo, and the layers of the
// copy-on-write mounts (directories under p.cowRoot).
func (p *plan) mountInput(s *Spec, all []fs.Mount, home string) (fs.PlanInput, error) {
	planInput := fs.PlanInput{Mounts: all, System: probeSystem(), Home: home, PreOpened: p.privileged}
	planInput.Tmpfs, planInput.Masked, planInput.ReadOnly = s.Tmpfs, s.MaskedPaths, s.ReadOnlyPaths
	planInput.WritableRoot = s.WritableRoot
	if s.Sudo {
		exe, err := os.Executable()
		if err != nil {
			return fs.PlanInput{}, fmt.Errorf("sudo: finding tent's binary to bind: %w", err)
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
	return planInput, nil
}

// resolveConfig sets the init's config: the mount plan, the sandbox's
// names and network, and the command name (args) with its environment
// and directory.
func (p *plan) resolveConfig(s *Spec, mounts *fs.Plan, name string, args, netEnv []string, home, user string) {
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
			User: p.commandCreds(s.User),
		},
	}
}

// reportBase reports the protections every full-tier sandbox has, its
// network and root filesystem, and the git guards of its writable mounts
// (guarded git directories; partial: where the search stopped).
func (p *plan) reportBase(s *Spec, guarded int, partial []string) {
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
	if names := capabilityNames(p.caps); names != "" {
		r.add("capabilities", Enforced, "kept in the sandbox's user namespace: "+names+" (by uid 0; by every uid: "+capabilityNames(p.ambient)+")")
	} else {
		r.add("capabilities", Enforced, "all sets empty")
	}
	switch {
	case len(partial) > 0:
		r.add("git control files", Degraded, fmt.Sprintf("read-only in %d git directories; the search of %s stopped at its bound (4096 entries, 128 git directories): repositories beyond it are writable", guarded, strings.Join(partial, ", ")))
	case guarded > 0:
		r.add("git control files", Enforced, fmt.Sprintf("read-only in %d git directories of the rw mounts (hooks, config)", guarded))
	}
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
		if !s.Seccomp.KeepDefault {
			p.cfg.Seccomp = prog.Marshal()
			p.report.add("seccomp", Enforced, "custom profile")
			return nil
		}
		def, err := defaultProgram()
		if err != nil {
			return fmt.Errorf("compiling the default seccomp profile: %w", err)
		}
		defProg, err := seccomp.UnmarshalProgram(def)
		if err != nil {
			return err
		}
		// No kept thread (Config.ReuseThread): the custom profile may
		// refuse what the Go runtime does while it waits.
		p.cfg.Seccomp = seccomp.MarshalStack(defProg, prog)
		p.defaultSeccomp = true
		p.report.add("seccomp", Enforced, "default profile and a custom profile")
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
