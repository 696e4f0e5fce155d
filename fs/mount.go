package fs

import (
	"errors"
	"fmt"
	"path"
	"path/filepath"
	"strings"
)

// ErrInvalidMount is wrapped by every validation error of a mount.
var ErrInvalidMount = errors.New("invalid mount")

// Access is how a sandbox may use a mount.
type Access string

const (
	// ReadOnly mounts are bound read-only: writes fail with EROFS.
	ReadOnly Access = "ro"
	// ReadWrite mounts are bound read-write: writes reach the host at once.
	ReadWrite Access = "rw"
	// CopyOnWrite mounts are overlays over the host directory: the
	// sandbox reads and writes freely, the host directory never changes,
	// and the changes (the overlay's upper layer, on the host) can be
	// listed and exported (see Diff).
	CopyOnWrite Access = "cow"
)

// Mount binds a host path into the sandbox.
type Mount struct {
	// Source is an absolute host path. It must exist.
	Source string `json:"source"`
	// Target is the absolute path inside the sandbox.
	Target string `json:"target"`
	// Access is ro or rw. The zero value means ro.
	Access Access `json:"access,omitempty"`
	// Slave makes the bind a recursive slave of its source (an OCI
	// "rslave" bind, Kubernetes' HostToContainer propagation): mounts
	// the host later makes beneath a shared source appear inside; none
	// made inside ever reaches the host. Without it every bind is
	// private, as the sandbox's root is.
	Slave bool `json:"slave,omitempty"`
}

// Writable reports whether the mount lets the sandbox write.
func (m Mount) Writable() bool { return m.Access == ReadWrite || m.Access == CopyOnWrite }

// ParseMount parses the command line form SRC[:DST] for the given access.
// A relative SRC is resolved against cwd; DST defaults to SRC's absolute
// path. Existence of SRC is checked later, by [Validate].
func ParseMount(spec string, access Access, cwd string) (Mount, error) {
	if spec == "" {
		return Mount{}, fmt.Errorf("%w: empty --%s value: want SRC[:DST]", ErrInvalidMount, access)
	}
	src, dst, hasDst := strings.Cut(spec, ":")
	if src == "" {
		return Mount{}, fmt.Errorf("%w: --%s %q: empty source: want SRC[:DST]", ErrInvalidMount, access, spec)
	}
	if !filepath.IsAbs(src) {
		src = filepath.Join(cwd, src)
	}
	src = filepath.Clean(src)
	if !hasDst {
		dst = src
	} else if dst == "" {
		return Mount{}, fmt.Errorf("%w: --%s %q: empty target after ':'", ErrInvalidMount, access, spec)
	}
	return Mount{Source: src, Target: dst, Access: access}, nil
}

// reserved are targets a mount may not replace or shadow.
var reserved = []string{"/proc", "/dev", "/sys"}

// ValidateTarget checks one target path: absolute, clean, no "..", not
// reserved. It does not touch the filesystem.
func ValidateTarget(target string) error {
	switch {
	case target == "":
		return fmt.Errorf("%w: empty target", ErrInvalidMount)
	case strings.ContainsRune(target, 0):
		return fmt.Errorf("%w: target %q contains a NUL byte", ErrInvalidMount, target)
	case !path.IsAbs(target):
		return fmt.Errorf("%w: target %q is not absolute", ErrInvalidMount, target)
	}
	for _, elem := range strings.Split(target, "/") {
		if elem == ".." {
			return fmt.Errorf("%w: target %q contains \"..\"", ErrInvalidMount, target)
		}
	}
	if path.Clean(target) != target {
		return fmt.Errorf("%w: target %q is not clean (want %q)", ErrInvalidMount, target, path.Clean(target))
	}
	if target == "/" {
		return fmt.Errorf("%w: target \"/\" is reserved: the root is tent's own tmpfs", ErrInvalidMount)
	}
	for _, r := range reserved {
		if target == r || strings.HasPrefix(target, r+"/") {
			return fmt.Errorf("%w: target %q is reserved (%s and below belong to the sandbox)", ErrInvalidMount, target, r)
		}
	}
	return nil
}

// Validate checks a list of mounts as a whole: each target, each access,
// duplicate targets, and (through stat) that each source exists. It
// creates nothing.
func Validate(mounts []Mount, stat func(string) error) error {
	seen := make(map[string]int, len(mounts))
	for i, m := range mounts {
		if err := ValidateTarget(m.Target); err != nil {
			return fmt.Errorf("mount %d (%s): %w", i+1, m.Source, err)
		}
		switch m.Access {
		case "", ReadOnly, ReadWrite, CopyOnWrite:
		default:
			return fmt.Errorf("mount %d (%s): %w: unknown access %q: want ro, rw or cow", i+1, m.Source, ErrInvalidMount, m.Access)
		}
		if j, dup := seen[m.Target]; dup {
			return fmt.Errorf("mount %d (%s): %w: target %q is already used by mount %d", i+1, m.Source, ErrInvalidMount, m.Target, j)
		}
		seen[m.Target] = i + 1
		if !filepath.IsAbs(m.Source) {
			return fmt.Errorf("mount %d: %w: source %q is not absolute", i+1, ErrInvalidMount, m.Source)
		}
		if err := stat(m.Source); err != nil {
			return fmt.Errorf("mount %d: %w: source %q: %w", i+1, ErrInvalidMount, m.Source, err)
		}
	}
	return nil
}
