package fs

import (
	"fmt"
	"path"
	"sort"
	"strings"
)

// Kind is what a [Step] creates.
type Kind string

const (
	// KindBind binds a host path (or a mount received as a descriptor).
	KindBind Kind = "bind"
	// KindTmpfs mounts a fresh tmpfs.
	KindTmpfs Kind = "tmpfs"
	// KindProc mounts the sandbox's own procfs, or, with FD, attaches one
	// made for it (see [Plan.UseProc]).
	KindProc Kind = "proc"
	// KindDevpts mounts a new devpts instance.
	KindDevpts Kind = "devpts"
	// KindSysfs attaches a read-only sysfs made for the sandbox on the
	// host (descriptor FD; see [Plan.AddSysfs]).
	KindSysfs Kind = "sysfs"
	// KindSymlink creates a symbolic link.
	KindSymlink Kind = "symlink"
	// KindOverlay mounts an overlay: Source is the lower (host) directory,
	// Upper and Work are host directories that receive the changes.
	KindOverlay Kind = "overlay"
	// KindRoot makes a host directory (Source, a caller's path opened
	// without following symlinks, or the descriptor FD) the sandbox's
	// root instead of tent's tmpfs: see [PlanInput].Root. It is always
	// the first step, and there is at most one.
	KindRoot Kind = "root"
	// KindMask hides what is at Target, when something is (an OCI
	// bundle's maskedPaths): a directory under an empty read-only tmpfs,
	// anything else under the host's /dev/null, bound read-only.
	KindMask Kind = "mask"
	// KindReadOnly makes what is at Target, when something is, a
	// read-only, nosuid, nodev, noexec bind of itself (an OCI bundle's
	// readonlyPaths).
	KindReadOnly Kind = "readonly"
	// KindCgroup binds a directory of the sandbox's own cgroup (Source, a
	// host path opened without following symlinks) read-only, nosuid,
	// nodev and noexec: see [Plan.AddCgroupView].
	KindCgroup Kind = "cgroup"
	// KindUnion mounts a read-only overlay of Lowers (directories inside
	// the new root, the first on top) at Target, once every other step is
	// done; with Optional, only where Target exists. tent's sudo uses one
	// to appear in /usr/local/bin beside the host's programs there.
	KindUnion Kind = "union"
)

// Step is one operation of a [Plan]. Steps are plain data so that a plan
// can be checked by tests and sent to the sandbox's init as JSON.
type Step struct {
	Kind   Kind   `json:"kind"`
	Target string `json:"target"`
	// Source is the host path of a bind.
	Source string `json:"source,omitempty"`
	// FD, when >= 0, is the index of a pre-opened detached mount (from
	// open_tree) handed to Apply instead of opening Source.
	FD int `json:"fd"`
	// ReadOnly makes the mount read-only. A tmpfs is made read-only once
	// the steps that mount or create beneath it are done (/dev,
	// /sys/fs/cgroup on cgroup v1).
	ReadOnly bool `json:"ro,omitempty"`
	// Device keeps device nodes usable (binds of /dev nodes).
	Device bool `json:"device,omitempty"`
	// Writable marks a target the command may write beneath (Landlock).
	Writable bool `json:"writable,omitempty"`
	// Slave makes a bind a recursive slave of its source (Mount.Slave)
	// rather than private.
	Slave bool `json:"slave,omitempty"`
	// Mode is the permission of a tmpfs root.
	Mode uint32 `json:"mode,omitempty"`
	// LinkTo is a symlink's content.
	LinkTo string `json:"link_to,omitempty"`
	// User marks a step that comes from the caller's mounts.
	User bool `json:"user,omitempty"`
	// Upper and Work are an overlay's host directories.
	Upper string `json:"upper,omitempty"`
	Work  string `json:"work,omitempty"`
	// Lowers are a union's directories, inside the new root.
	Lowers []string `json:"lowers,omitempty"`
	// Optional skips the step, and every later step beneath its
	// target, when its mount point does not exist (no mount point is
	// made in a caller's root for it).
	Optional bool `json:"optional,omitempty"`
}

// Plan is the ordered list of steps that builds a sandbox's root.
type Plan struct {
	Steps []Step `json:"steps"`
	// Home is $HOME inside the sandbox.
	Home string `json:"home"`
	// WritableRoot leaves tent's root tmpfs writable: see
	// [PlanInput].WritableRoot.
	WritableRoot bool `json:"writable_root,omitempty"`
}

// SystemEntry is one host system path (for example /usr or /lib64) as
// probed on the host: a directory to bind read-only, or, on merged-usr
// hosts, a symlink to recreate.
type SystemEntry struct {
	Path   string
	LinkTo string // non-empty for a symlink
}

// DefaultSystemPaths are the host paths bound read-only when present.
var DefaultSystemPaths = []string{"/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc"}

// devNodes are the host character devices bound into /dev.
var devNodes = []string{"null", "zero", "full", "random", "urandom", "tty"}

// PlanInput is what [NewPlan] needs.
type PlanInput struct {
	// Mounts are the caller's mounts, already validated with [Validate].
	Mounts []Mount
	// System is the probe of DefaultSystemPaths on the host.
	System []SystemEntry
	// Home is $HOME inside the sandbox ("/root" or "/home/NAME").
	Home string
	// PreOpened, when true, makes each user bind refer to a descriptor
	// (its index in Mounts) instead of its source path: root callers open
	// sources on the host, where they have the access the sandbox lacks;
	// a cow mount's descriptor is then its (idmapped) lower layer.
	PreOpened bool
	// Layers holds, for each cow mount (by index in Mounts), the host
	// directories of its overlay's upper and work layers.
	Layers map[int]Layer
	// Root, when not nil, is a host directory to use as the sandbox's
	// root (an OCI bundle's rootfs) instead of a tmpfs holding the host's
	// system directories: System is then ignored, and neither /tmp nor
	// Home gets a tmpfs of its own (the root's directories are used).
	// Its Target must be "/" and its Access ro or rw (cow is refused);
	// see [ValidateRoot]. /proc and /dev are still tent's own, and the
	// root is nosuid and nodev like every bind. With PreOpened, its
	// descriptor is the one at index len(Mounts).
	Root *Mount
	// Tmpfs are targets of empty, writable tmpfs mounts (mode 0755,
	// nosuid, nodev), validated as mount targets are.
	Tmpfs []string
	// Masked are paths to hide, and ReadOnly paths to make read-only,
	// once everything is mounted (an OCI bundle's maskedPaths and
	// readonlyPaths): absolute and clean, under /proc and /sys too; a
	// path that does not exist in the sandbox is left alone.
	Masked, ReadOnly []string
	// Private are steps of tent's own (its sudo's directory, for
	// example): tmpfs, symlinks and unions, validated as targets are;
	// unions are applied last.
	Private []Step
	// WritableRoot leaves tent's root tmpfs writable (it is made
	// read-only otherwise), and Landlock lets the command write beneath
	// "/": new files and directories at / live in that tmpfs, never on
	// the host; the host's system directories, /dev and the caller's
	// read-only mounts stay read-only mounts (EROFS). It cannot be
	// combined with Root (which decides its own writability).
	WritableRoot bool
}

// ValidateRoot checks a [PlanInput].Root: target "/", an absolute,
// clean source, access ro or rw. It does not touch the filesystem.
func ValidateRoot(m Mount) error {
	switch {
	case m.Target != "/":
		return fmt.Errorf("%w: root: target %q must be \"/\"", ErrInvalidMount, m.Target)
	case m.Source == "" || strings.ContainsRune(m.Source, 0):
		return fmt.Errorf("%w: root: source %q is empty or contains a NUL byte", ErrInvalidMount, m.Source)
	case !path.IsAbs(m.Source) || path.Clean(m.Source) != m.Source:
		return fmt.Errorf("%w: root: source %q must be an absolute, clean host path", ErrInvalidMount, m.Source)
	case m.Source == "/":
		return fmt.Errorf("%w: root: the host's own root cannot be the sandbox's root", ErrInvalidMount)
	}
	switch m.Access {
	case "", ReadOnly, ReadWrite:
	default:
		return fmt.Errorf("%w: root: access %q: want ro or rw", ErrInvalidMount, m.Access)
	}
	return nil
}

// Layer is where a cow mount's changes go on the host.
type Layer struct {
	Upper string `json:"upper"`
	Work  string `json:"work"`
}

// NewPlan builds the mount plan. It performs no system calls.
func NewPlan(in PlanInput) (*Plan, error) {
	if err := ValidateTarget(in.Home); err != nil {
		return nil, fmt.Errorf("home: %w", err)
	}
	userTargets := make(map[string]bool, len(in.Mounts))
	for _, m := range in.Mounts {
		userTargets[m.Target] = true
	}
	base, err := baseSteps(in, userTargets)
	if err != nil {
		return nil, err
	}
	base, late, err := extraSteps(in, userTargets, base)
	if err != nil {
		return nil, err
	}
	steps, err := mountSteps(in, base)
	if err != nil {
		return nil, err
	}
	// Parents before children; otherwise keep the order above (the root
	// first).
	sort.SliceStable(steps, func(i, j int) bool { return depth(steps[i].Target) < depth(steps[j].Target) })
	// Masks and read-only paths once everything they may lie in exists.
	steps = append(steps, late...)
	return &Plan{Steps: steps, Home: in.Home, WritableRoot: in.WritableRoot}, nil
}

// baseSteps returns the steps every sandbox gets: the caller's root or
// the host's system paths (less those a caller's mount in userTargets
// replaces), /proc, /dev, and tmpfs on /tmp and home when nothing else
// is there.
func baseSteps(in PlanInput, userTargets map[string]bool) ([]Step, error) {
	var base []Step
	system := in.System
	if in.Root != nil {
		if in.WritableRoot {
			return nil, fmt.Errorf("%w: root: a caller's root and a writable tmpfs root exclude each other", ErrInvalidMount)
		}
		if err := ValidateRoot(*in.Root); err != nil {
			return nil, err
		}
		r := Step{Kind: KindRoot, Target: "/", Source: in.Root.Source, ReadOnly: !in.Root.Writable(), Writable: in.Root.Writable(), FD: -1}
		if in.PreOpened {
			r.FD = len(in.Mounts)
		}
		base = append(base, r)
		system = nil
	}
	for _, e := range system {
		if userTargets[e.Path] {
			continue // the caller's mount replaces this system path
		}
		if e.LinkTo != "" {
			base = append(base, Step{Kind: KindSymlink, Target: e.Path, LinkTo: e.LinkTo, FD: -1})
			continue
		}
		base = append(base, Step{Kind: KindBind, Target: e.Path, Source: e.Path, ReadOnly: true, FD: -1})
	}
	base = append(base,
		Step{Kind: KindProc, Target: "/proc", FD: -1},
		Step{Kind: KindTmpfs, Target: "/dev", Mode: 0o755, ReadOnly: true, FD: -1},
	)
	for _, n := range devNodes {
		base = append(base, Step{Kind: KindBind, Target: "/dev/" + n, Source: "/dev/" + n, Device: true, Writable: true, FD: -1})
	}
	base = append(base,
		Step{Kind: KindDevpts, Target: "/dev/pts", Writable: true, FD: -1},
		Step{Kind: KindSymlink, Target: "/dev/ptmx", LinkTo: "pts/ptmx", FD: -1},
		Step{Kind: KindTmpfs, Target: "/dev/shm", Mode: 0o1777, Writable: true, FD: -1},
		Step{Kind: KindSymlink, Target: "/dev/fd", LinkTo: "/proc/self/fd", FD: -1},
		Step{Kind: KindSymlink, Target: "/dev/stdin", LinkTo: "/proc/self/fd/0", FD: -1},
		Step{Kind: KindSymlink, Target: "/dev/stdout", LinkTo: "/proc/self/fd/1", FD: -1},
		Step{Kind: KindSymlink, Target: "/dev/stderr", LinkTo: "/proc/self/fd/2", FD: -1},
	)
	if !userTargets["/tmp"] && in.Root == nil {
		base = append(base, Step{Kind: KindTmpfs, Target: "/tmp", Mode: 0o1777, Writable: true, FD: -1})
	}
	if !covered(in.Home, in.Mounts) && in.Root == nil {
		base = append(base, Step{Kind: KindTmpfs, Target: in.Home, Mode: 0o700, Writable: true, FD: -1})
	}
	return base, nil
}

// extraSteps appends the caller's tmpfs and tent's own tmpfs and
// symlinks to base, and returns, as late, the steps that come after
// every mount: tent's own unions, masks and read-only paths.
func extraSteps(in PlanInput, userTargets map[string]bool, base []Step) (_, late []Step, _ error) {
	for i, t := range in.Tmpfs {
		if err := ValidateTarget(t); err != nil {
			return nil, nil, fmt.Errorf("tmpfs %d: %w", i+1, err)
		}
		if userTargets[t] {
			return nil, nil, fmt.Errorf("tmpfs %d: %w: target %q is already a mount's", i+1, ErrInvalidMount, t)
		}
		userTargets[t] = true
		base = append(base, Step{Kind: KindTmpfs, Target: t, Mode: 0o755, Writable: true, FD: -1})
	}
	for _, st := range in.Private {
		if err := ValidateTarget(st.Target); err != nil {
			return nil, nil, fmt.Errorf("tent's own %s: %w", st.Kind, err)
		}
		switch st.Kind {
		case KindUnion:
			late = append(late, st)
		case KindTmpfs, KindSymlink:
			base = append(base, st)
		default:
			return nil, nil, fmt.Errorf("%w: tent's own step %s %s: want tmpfs, symlink or union", ErrInvalidMount, st.Kind, st.Target)
		}
	}
	for _, list := range []struct {
		kind  Kind
		paths []string
	}{{KindMask, in.Masked}, {KindReadOnly, in.ReadOnly}} {
		for _, t := range list.paths {
			if t == "" || t == "/" || !path.IsAbs(t) || path.Clean(t) != t || strings.ContainsRune(t, 0) {
				return nil, nil, fmt.Errorf("%w: %s path %q: want an absolute, clean path other than /", ErrInvalidMount, list.kind, t)
			}
			late = append(late, Step{Kind: list.kind, Target: t, FD: -1})
		}
	}
	return base, late, nil
}

// mountSteps appends a step per caller's mount to base: a bind, or an
// overlay for a copy-on-write mount. A mount beneath one of base's
// symlinks is refused.
func mountSteps(in PlanInput, base []Step) ([]Step, error) {
	symlinks := map[string]bool{}
	for _, s := range base {
		if s.Kind == KindSymlink {
			symlinks[s.Target] = true
		}
	}
	steps := base
	for i, m := range in.Mounts {
		for dir := path.Dir(m.Target); dir != "/"; dir = path.Dir(dir) {
			if symlinks[dir] {
				return nil, fmt.Errorf("mount %d (%s): %w: target %q lies beneath %s, a symlink on this host; mount at the symlink's destination instead", i+1, m.Source, ErrInvalidMount, m.Target, dir)
			}
		}
		s := Step{Kind: KindBind, Target: m.Target, Source: m.Source, ReadOnly: !m.Writable(), Writable: m.Writable(), User: true, FD: -1, Slave: m.Slave}
		switch {
		case m.Slave && m.Access == CopyOnWrite:
			return nil, fmt.Errorf("mount %d (%s): %w: a cow mount cannot be a slave of its source (its lower layer is a snapshot)", i+1, m.Source, ErrInvalidMount)
		case m.Access == CopyOnWrite:
			l, ok := in.Layers[i]
			if !ok {
				return nil, fmt.Errorf("mount %d (%s): %w: no layer directories for a cow mount", i+1, m.Source, ErrInvalidMount)
			}
			s.Kind, s.Upper, s.Work = KindOverlay, l.Upper, l.Work
			if in.PreOpened {
				s.FD = i // an idmapped lower layer from the host
			}
		case in.PreOpened:
			s.FD = i
		}
		steps = append(steps, s)
	}
	return steps, nil
}

// covered reports whether a user mount's target is p or one of its parents.
func covered(p string, mounts []Mount) bool {
	for _, m := range mounts {
		if m.Target == p || strings.HasPrefix(p, m.Target+"/") {
			return true
		}
	}
	return false
}

func depth(p string) int { return strings.Count(p, "/") }

// InsidePath maps a host path to the sandbox path through the plan's user
// binds (the deepest source containing it wins). ok is false when hostPath
// is not inside any user mount.
func (p *Plan) InsidePath(hostPath string) (inside string, ok bool) {
	best := -1
	for _, s := range p.Steps {
		if !s.User {
			continue
		}
		if hostPath == s.Source || strings.HasPrefix(hostPath, strings.TrimSuffix(s.Source, "/")+"/") {
			if l := len(s.Source); l > best {
				best = l
				inside = path.Join(s.Target, strings.TrimPrefix(hostPath, s.Source))
				ok = true
			}
		}
	}
	return inside, ok
}

// UseProc makes the plan's /proc the detached procfs mount that will be
// passed as descriptor fd (an index into Apply's descriptors) rather than
// one the init makes: a procfs of a pid namespace the sandbox's user
// namespace does not own (a pod's), made on the host. It reports whether
// the plan has a /proc.
func (p *Plan) UseProc(fd int) bool {
	for i := range p.Steps {
		if p.Steps[i].Kind == KindProc && p.Steps[i].Target == "/proc" {
			p.Steps[i].FD = fd
			return true
		}
	}
	return false
}

// AddSysfs gives the plan a /sys: the detached, read-only sysfs mount
// that will be passed as descriptor fd (an index into Apply's
// descriptors), made on the host for the sandbox's network namespace
// (namespaces.Sysfs). It goes right after /proc, so that the cgroup view
// and any masks beneath /sys lie on it, and [SysfsMasked] are masked; with
// a caller's root, only where that root has /sys. It reports false when the plan has no /proc or
// already has something at /sys.
func (p *Plan) AddSysfs(fd int) bool {
	at := -1
	for i, s := range p.Steps {
		if s.Target == "/sys" {
			return false
		}
		if s.Kind == KindProc && s.Target == "/proc" {
			at = i + 1
		}
	}
	if at < 0 {
		return false
	}
	optional := len(p.Steps) > 0 && p.Steps[0].Kind == KindRoot
	step := Step{Kind: KindSysfs, Target: "/sys", FD: fd, ReadOnly: true, Optional: optional}
	p.Steps = append(p.Steps[:at], append([]Step{step}, p.Steps[at:]...)...)
	for _, m := range SysfsMasked {
		p.Steps = append(p.Steps, Step{Kind: KindMask, Target: m, FD: -1})
	}
	return true
}

// SysfsMasked are hidden beneath a sysfs of [Plan.AddSysfs], whatever the
// caller asks, as runc masks them: the firmware's tables and variables,
// and the energy counters of powercap (RAPL, a side channel).
var SysfsMasked = []string{"/sys/firmware", "/sys/devices/virtual/powercap"}
