package manager

import (
	"fmt"
	"strings"

	"github.com/tent-sandbox/tent/sandbox"
)

// Capability names one feature of a backend ([sandbox.Capabilities]) a
// [Selection] can require.
type Capability string

// Capabilities a [Selection] can require.
const (
	// CapSnapshot requires Capabilities.Snapshot.
	CapSnapshot Capability = "snapshot"
	// CapSuspend requires Capabilities.Suspend.
	CapSuspend Capability = "suspend"
	// CapResume requires Capabilities.Resume.
	CapResume Capability = "resume"
	// CapNetworkPolicy requires Capabilities.NetworkPolicy.
	CapNetworkPolicy Capability = "network-policy"
	// CapCgroup requires a cgroup of either version (resource limits).
	CapCgroup Capability = "cgroup"
	// CapLandlock requires Landlock at any ABI (see
	// Selection.MinLandlockABI for a minimum).
	CapLandlock Capability = "landlock"
)

var knownCapabilities = []Capability{CapSnapshot, CapSuspend, CapResume, CapNetworkPolicy, CapCgroup, CapLandlock}

// in reports whether caps has the capability; an unknown name is an
// error.
func (want Capability) in(caps sandbox.Capabilities) (bool, error) {
	switch want {
	case CapSnapshot:
		return caps.Snapshot, nil
	case CapSuspend:
		return caps.Suspend, nil
	case CapResume:
		return caps.Resume, nil
	case CapNetworkPolicy:
		return caps.NetworkPolicy, nil
	case CapCgroup:
		return caps.CgroupVersion != "" && caps.CgroupVersion != "none", nil
	case CapLandlock:
		return caps.LandlockABI > 0, nil
	}
	names := make([]string, len(knownCapabilities))
	for i, k := range knownCapabilities {
		names[i] = string(k)
	}
	return false, fmt.Errorf("unknown capability %q (want one of %s)", want, strings.Join(names, ", "))
}

// Selection chooses a backend for a sandbox: the first of the manager's
// backends, in order, that has every required capability.
type Selection struct {
	// Backend, when not "", names the only backend to consider.
	Backend string
	// Require lists the capabilities the backend must have.
	Require []Capability
	// MinLandlockABI, when positive, is the lowest acceptable
	// Capabilities.LandlockABI.
	MinLandlockABI int
}

// validate checks sel's own fields; field prefixes the names in errors.
func (sel Selection) validate(field string) error {
	for i, c := range sel.Require {
		if _, err := c.in(sandbox.Capabilities{}); err != nil {
			return fmt.Errorf("%w: %s.Require[%d]: %w", sandbox.ErrInvalidOptions, field, i, err)
		}
	}
	if sel.MinLandlockABI < 0 {
		return fmt.Errorf("%w: %s.MinLandlockABI: %d is negative", sandbox.ErrInvalidOptions, field, sel.MinLandlockABI)
	}
	return nil
}

// lacks lists what caps misses of sel (sel is valid).
func (sel Selection) lacks(caps sandbox.Capabilities) []string {
	var out []string
	for _, c := range sel.Require {
		if ok, _ := c.in(caps); !ok {
			out = append(out, string(c))
		}
	}
	if sel.MinLandlockABI > 0 && caps.LandlockABI < sel.MinLandlockABI {
		out = append(out, fmt.Sprintf("landlock ABI %d (has %d)", sel.MinLandlockABI, caps.LandlockABI))
	}
	return out
}

// accepts reports whether b satisfies sel (sel is valid).
func (sel Selection) accepts(b sandbox.Backend) bool {
	return (sel.Backend == "" || sel.Backend == b.Name()) && len(sel.lacks(b.Capabilities())) == 0
}

// choose returns the first backend that satisfies sel; field names sel in
// errors.
func (sel Selection) choose(backends []sandbox.Backend, field string) (sandbox.Backend, error) {
	if err := sel.validate(field); err != nil {
		return nil, err
	}
	var why []string
	named := false
	for _, b := range backends {
		if sel.Backend != "" && b.Name() != sel.Backend {
			continue
		}
		named = true
		missing := sel.lacks(b.Capabilities())
		if len(missing) == 0 {
			return b, nil
		}
		why = append(why, b.Name()+" lacks "+strings.Join(missing, ", "))
	}
	if !named {
		names := make([]string, len(backends))
		for i, b := range backends {
			names[i] = b.Name()
		}
		return nil, fmt.Errorf("%w: %s.Backend: no backend named %q (have %s)", sandbox.ErrInvalidOptions, field, sel.Backend, strings.Join(names, ", "))
	}
	return nil, fmt.Errorf("%w: no backend can provide what %s requires: %s", sandbox.ErrUnsupported, field, strings.Join(why, "; "))
}
