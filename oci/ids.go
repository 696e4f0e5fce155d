package oci

import (
	"errors"
	"fmt"
)

// ErrNotExist is returned for a container id with no state.
var ErrNotExist = errors.New("container does not exist")

// DefaultRoot is the state root when --root is not given (runc's is
// /run/runc).
const DefaultRoot = "/run/tent-runc"

// validID accepts runc's container ids: letters, digits, '_', '+', '-'
// and '.', not "." or "..", at most 1024 bytes.
func validID(id string) error {
	if id == "" || id == "." || id == ".." || len(id) > 1024 {
		return fmt.Errorf("invalid container id %q", id)
	}
	for i := 0; i < len(id); i++ {
		c := id[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || c == '_' || c == '+' || c == '-' || c == '.') {
			return fmt.Errorf("invalid container id %q: want letters, digits and _ + - . only", id)
		}
	}
	return nil
}
