package netpolicy

import "fmt"

// Mode is a sandbox's network mode. The zero value is [None], the most
// restrictive one.
type Mode string

const (
	// None gives the sandbox its own network namespace with only loopback.
	None Mode = "none"
	// Limited gives the sandbox its own network namespace with only
	// loopback, plus listeners inside that reach the host-side [Proxy],
	// which lets through connections to the hosts a [Policy] allows.
	Limited Mode = "limited"
	// Host shares the host's network namespace. It can only be chosen when
	// the sandbox is created.
	Host Mode = "host"
)

// ParseMode parses a --net value. The empty string means [None].
func ParseMode(s string) (Mode, error) {
	switch Mode(s) {
	case "", None:
		return None, nil
	case Limited:
		return Limited, nil
	case Host:
		return Host, nil
	}
	return "", fmt.Errorf("unknown net mode %q: want none, limited or host", s)
}

// Normalize returns m with the zero value mapped to [None].
func (m Mode) Normalize() Mode {
	if m == "" {
		return None
	}
	return m
}
