package supervised

import (
	"fmt"
	"strings"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/policy"
)

// validName checks a sandbox's name (Spec.Name): letters, digits, '_',
// '.' and '-', starting with a letter or digit (as docker's container
// names), at most 128 bytes, and not shaped like a sandbox id (16 hex
// digits), which would shadow one.
func validName(name string) error {
	ok := policy.ValidName(name)
	if !ok {
		return &nameError{fmt.Sprintf("Spec.Name %q: want letters, digits, '_', '.' or '-', starting with a letter or digit (at most 128)", name)}
	}
	if isHex := strings.Trim(name, "0123456789abcdef") == ""; isHex && len(name) == 16 {
		return &nameError{fmt.Sprintf("Spec.Name %q: has the shape of a sandbox id (16 hex digits); choose another name", name)}
	}
	return nil
}

// nameError refuses a Spec.Name: a malformed one, or one in use. It is a
// sandbox.ErrInvalidSpec (nothing was created) whose message names the
// field without the sentinel's prefix.
type nameError struct{ msg string }

func (e *nameError) Error() string        { return e.msg }
func (e *nameError) Is(target error) bool { return target == sandbox.ErrInvalidSpec }
