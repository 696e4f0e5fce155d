package sandbox

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path"
	"strings"

	"github.com/tent-sandbox/tent/fs"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/netpolicy"
)

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
	if err := validateIDs(s.IDRange, s.User, "user"); err != nil {
		return err
	}
	if _, _, err := capabilityMasks(s.Capabilities, s.AmbientCapabilities, ""); err != nil {
		return err
	}
	if s.Hostname != "" && !validName(s.Hostname) {
		return fmt.Errorf("hostname: %q is not a valid host name", s.Hostname)
	}
	if s.Workdir != "" && (!path.IsAbs(s.Workdir) || path.Clean(s.Workdir) != s.Workdir) {
		return fmt.Errorf("workdir: %q must be an absolute, clean path inside the sandbox", s.Workdir)
	}
	if err := s.Service.Validate(); err != nil {
		return err
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

// validateIDs checks an id range, and a user (field names it) against it:
// a range never includes host root nor wraps, and groups, or ids other
// than the one mapped id, need a range that holds them.
func validateIDs(r *IDRange, u *User, field string) error {
	if r != nil {
		switch {
		case r.Host == 0:
			return errors.New("id_range.host: 0 would map host root into the sandbox")
		case r.Size == 0 || r.Size > 1<<24:
			return fmt.Errorf("id_range.size: %d: want 1 to %d ids", r.Size, 1<<24)
		case uint64(r.Host)+uint64(r.Size) > math.MaxUint32:
			return fmt.Errorf("id_range: host ids %d to %d pass the last valid id (%d)", r.Host, uint64(r.Host)+uint64(r.Size)-1, uint32(math.MaxUint32-1))
		}
	}
	if u == nil {
		return nil
	}
	if len(u.Groups) > maxGroups {
		return fmt.Errorf("%s.groups: %d groups, at most %d", field, len(u.Groups), maxGroups)
	}
	if r == nil {
		if len(u.Groups) > 0 {
			return fmt.Errorf("%s.groups: supplementary groups need id_range (the sandbox maps one id otherwise)", field)
		}
		return nil
	}
	if u.UID >= r.Size || u.GID >= r.Size {
		return fmt.Errorf("%s: %d:%d is outside id_range (0 to %d)", field, u.UID, u.GID, r.Size-1)
	}
	for i, g := range u.Groups {
		if g >= r.Size {
			return fmt.Errorf("%s.groups[%d]: %d is outside id_range (0 to %d)", field, i, g, r.Size-1)
		}
	}
	return nil
}

// capabilityMask turns capability names into a mask, refusing (naming
// field) an unknown one and one no command may keep.
func capabilityMask(names []string, field string) (uint64, error) {
	var m uint64
	for i, n := range names {
		c, ok := namespaces.CapabilityNumber(n)
		switch {
		case !ok:
			return 0, fmt.Errorf("%s[%d]: %q is not a capability", field, i, n)
		case !grantable[namespaces.CapabilityName(c)]:
			return 0, fmt.Errorf("%s[%d]: %s is not granted in a sandbox (see Identity.Capabilities for those that are)", field, i, namespaces.CapabilityName(c))
		}
		m |= 1 << uint(c)
	}
	return m, nil
}

// capabilityNames lists mask's capabilities, comma-separated.
func capabilityNames(mask uint64) string {
	var names []string
	for c := range 64 {
		if mask&(1<<uint(c)) != 0 {
			names = append(names, namespaces.CapabilityName(c))
		}
	}
	return strings.Join(names, ", ")
}

// capabilityMasks checks a set of capabilities and its ambient part
// (prefix names the fields).
func capabilityMasks(caps, ambient []string, prefix string) (uint64, uint64, error) {
	c, err := capabilityMask(caps, prefix+"capabilities")
	if err != nil {
		return 0, 0, err
	}
	a, err := capabilityMask(ambient, prefix+"ambient_capabilities")
	if err != nil {
		return 0, 0, err
	}
	if extra := a &^ c; extra != 0 {
		return 0, 0, fmt.Errorf("%sambient_capabilities: %s not in %scapabilities", prefix, capabilityNames(extra), prefix)
	}
	return c, a, nil
}
