package cgroups

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Version is the cgroup interface a [Cgroup] uses. The zero value is None.
type Version int

const (
	// None means no cgroup: nothing usable is mounted or writable.
	None Version = iota
	// V1 is cgroup v1: one hierarchy per controller (or group of them),
	// available since Linux 2.6.24.
	V1
	// V2 is cgroup v2, the unified hierarchy (Linux 4.5; its freezer 5.2).
	V2
)

// String returns "v1", "v2" or "none".
func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case V2:
		return "v2"
	case None:
		return "none"
	}
	return "Version(" + strconv.Itoa(int(v)) + ")"
}

// Mode describes how cgroups are mounted on the host. The zero value is
// ModeNone.
type Mode int

const (
	// ModeNone: no cgroup hierarchy is mounted (or none is visible in this
	// mount namespace).
	ModeNone Mode = iota
	// Unified: cgroup v2 only (systemd's default since v247, Debian 11,
	// Ubuntu 21.10, Fedora 31).
	Unified
	// Hybrid: controllers on cgroup v1 hierarchies plus a cgroup2 mount,
	// usually /sys/fs/cgroup/unified, that usually holds no controllers.
	Hybrid
	// Legacy: cgroup v1 hierarchies only.
	Legacy
)

// String returns "unified", "hybrid", "legacy" or "none".
func (m Mode) String() string {
	switch m {
	case Unified:
		return "unified"
	case Hybrid:
		return "hybrid"
	case Legacy:
		return "legacy"
	case ModeNone:
		return "none"
	}
	return "Mode(" + strconv.Itoa(int(m)) + ")"
}

// Host is what [Detect] found. It is plain data: tests and callers may build
// one by hand, in which case every mount is taken to expose the hierarchy
// from its root (mountinfo's root field "/").
type Host struct {
	// Mode is how cgroups are mounted.
	Mode Mode
	// V2Root is the mount point of the cgroup2 hierarchy, for example
	// /sys/fs/cgroup (Unified) or /sys/fs/cgroup/unified (Hybrid); "" if
	// none is mounted.
	V2Root string
	// V1Mounts maps each cgroup v1 controller to its mount point, for
	// example "memory" → /sys/fs/cgroup/memory. Co-mounted controllers share
	// a mount point ("cpu" and "cpuacct" → /sys/fs/cgroup/cpu,cpuacct).
	// Named hierarchies appear as "name=systemd".
	V1Mounts map[string]string
	// V2Controllers lists the controllers available in this process's own
	// cgroup v2 cgroup (its cgroup.controllers): the ones it may enable for
	// children.
	V2Controllers []string
	// Self maps each v1 controller to this process's cgroup path in that
	// hierarchy, and "" to its cgroup v2 path, as /proc/self/cgroup lists
	// them (relative to the cgroup namespace's root).
	Self map[string]string

	// roots maps a controller ("" for v2) to the cgroup path its mount
	// exposes at its mount point (mountinfo field 4); absent means "/".
	roots map[string]string
}

// Detect reads procRoot/self/mountinfo and procRoot/self/cgroup (procRoot is
// "/proc" in production), and the cgroup.controllers file of this process's
// own v2 cgroup. Unit tests pass a fake tree: mount points in the fake
// mountinfo may point anywhere, for example into t.TempDir().
//
// Detect changes nothing. A host with no cgroup mounted is not an error: it
// returns Mode ModeNone.
func Detect(procRoot string) (*Host, error) {
	cgPath := filepath.Join(procRoot, "self", "cgroup")
	self, err := readSelfCgroup(cgPath)
	if err != nil {
		return nil, fmt.Errorf("failed to read this process's cgroups: %w", err)
	}
	miPath := filepath.Join(procRoot, "self", "mountinfo")
	data, err := readFile(miPath)
	if err != nil {
		return nil, fmt.Errorf("failed to read mounts: %w", err)
	}
	mounts, err := parseMountinfo(data)
	if err != nil {
		return nil, fmt.Errorf("failed to parse %s: %w", miPath, err)
	}

	h := &Host{V1Mounts: map[string]string{}, Self: self, roots: map[string]string{}}
	for _, m := range mounts {
		switch m.fstype {
		case "cgroup2":
			if h.V2Root != "" {
				continue
			}
			if p, ok := self[""]; ok {
				if _, ok := relTo(m.root, p); !ok {
					continue // a bind mount of some other subtree
				}
			}
			h.V2Root = m.point
			h.roots[""] = m.root
		case "cgroup":
			for _, c := range v1MountControllers(m.superOpts) {
				if _, dup := h.V1Mounts[c]; dup {
					continue
				}
				if p, ok := self[c]; ok {
					if _, ok := relTo(m.root, p); !ok {
						continue
					}
				}
				h.V1Mounts[c] = m.point
				h.roots[c] = m.root
			}
		}
	}

	hasV1 := false
	for c := range h.V1Mounts {
		if !strings.HasPrefix(c, "name=") {
			hasV1 = true
		}
	}
	switch {
	case h.V2Root != "" && !hasV1:
		h.Mode = Unified
	case h.V2Root != "":
		h.Mode = Hybrid
	case hasV1:
		h.Mode = Legacy
	default:
		h.Mode = ModeNone
	}

	if h.V2Root != "" {
		if dir, err := h.dir(""); err == nil {
			data, err := readFile(filepath.Join(dir, "cgroup.controllers"))
			switch {
			case err == nil:
				h.V2Controllers = strings.Fields(data)
			case !errors.Is(err, fs.ErrNotExist):
				return nil, fmt.Errorf("failed to read v2 controllers: %w", err)
			}
		}
	}
	return h, nil
}

// dir returns the directory of this process's own cgroup for controller
// (a v1 controller, or "" for v2).
func (h *Host) dir(controller string) (string, error) {
	mount := h.V2Root
	what := "cgroup v2"
	if controller != "" {
		mount = h.V1Mounts[controller]
		what = "cgroup v1 controller " + strconv.Quote(controller)
	}
	if mount == "" {
		return "", fmt.Errorf("%s is not mounted", what)
	}
	p, ok := h.Self[controller]
	if !ok {
		return "", fmt.Errorf("%s: this process's cgroup is not listed in /proc/self/cgroup", what)
	}
	root := h.roots[controller]
	if root == "" {
		root = "/"
	}
	rel, ok := relTo(root, p)
	if !ok {
		return "", fmt.Errorf("%s: this process's cgroup %s is outside the mount at %s (which shows %s)", what, p, mount, root)
	}
	return filepath.Join(mount, rel), nil
}

// relTo returns p relative to root (both absolute cgroup paths) and whether p
// lies inside root. Paths with ".." (a process outside its cgroup
// namespace's root) never do.
func relTo(root, p string) (string, bool) {
	if !strings.HasPrefix(p, "/") || strings.Contains("/"+p+"/", "/../") {
		return "", false
	}
	switch {
	case root == "/":
		return p, true
	case p == root:
		return "/", true
	case strings.HasPrefix(p, root+"/"):
		return p[len(root):], true
	}
	return "", false
}

// readSelfCgroup parses /proc/<pid>/cgroup: "ID:controllers:path" lines. The
// v2 line ("0::/path") is stored under the key "".
func readSelfCgroup(path string) (map[string]string, error) {
	data, err := readFile(path)
	if err != nil {
		return nil, err
	}
	self := map[string]string{}
	for line := range strings.Lines(data) {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			return nil, fmt.Errorf("%s: malformed line %q", path, line)
		}
		if f[1] == "" {
			self[""] = f[2]
			continue
		}
		for c := range strings.SplitSeq(f[1], ",") {
			self[c] = f[2]
		}
	}
	return self, nil
}

type mountEntry struct {
	root, point, fstype, superOpts string
}

// parseMountinfo parses proc(5) mountinfo lines:
//
//	36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 - ext3 /dev/root rw,errors=continue
func parseMountinfo(data string) ([]mountEntry, error) {
	var out []mountEntry
	for line := range strings.Lines(data) {
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		sep := -1
		for i := 6; i < len(f); i++ {
			if f[i] == "-" {
				sep = i
				break
			}
		}
		if sep < 0 || len(f) < sep+4 {
			return nil, fmt.Errorf("malformed line %q", strings.TrimSpace(line))
		}
		out = append(out, mountEntry{
			root:      unescapeOctal(f[3]),
			point:     unescapeOctal(f[4]),
			fstype:    f[sep+1],
			superOpts: f[sep+3],
		})
	}
	return out, nil
}

// unescapeOctal undoes the kernel's \ooo escaping of space, tab, newline and
// backslash in mountinfo paths.
func unescapeOctal(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// v1MountOptions are cgroup v1 mount options that are not controllers.
var v1MountOptions = map[string]bool{
	"rw": true, "ro": true, "noprefix": true, "clone_children": true,
	"xattr": true, "cpuset_v2_mode": true, "favordynmods": true,
	"nofavordynmods": true, "none": true, "all": true,
}

// v1MountControllers returns the controllers a cgroup v1 mount carries,
// from its super options ("rw,cpu,cpuacct" or "rw,name=systemd").
func v1MountControllers(superOpts string) []string {
	var out []string
	for o := range strings.SplitSeq(superOpts, ",") {
		if o == "" || v1MountOptions[o] || (strings.Contains(o, "=") && !strings.HasPrefix(o, "name=")) {
			continue
		}
		out = append(out, o)
	}
	return out
}

// AtRoot returns h as seen from the top of each hierarchy: sandbox
// cgroups created with it are children of the root cgroup instead of this
// process's own. That is for privileged callers whose own cgroup v2 holds
// other processes (a login shell, a CI step — the "no internal processes"
// rule then forbids enabling controllers for children there), which may
// write at the root. V2Controllers is read from the root's
// cgroup.controllers.
func (h *Host) AtRoot() (*Host, error) {
	r := *h
	r.Self = make(map[string]string, len(h.Self))
	for c := range h.Self {
		root := h.roots[c]
		if root == "" {
			root = "/"
		}
		r.Self[c] = root
	}
	if h.V2Root != "" {
		b, err := os.ReadFile(filepath.Join(h.V2Root, "cgroup.controllers"))
		if err != nil {
			return nil, err
		}
		r.V2Controllers = strings.Fields(string(b))
	}
	return &r, nil
}
