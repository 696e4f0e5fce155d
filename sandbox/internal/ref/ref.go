// Package ref resolves a reference (an id or a unique prefix of one)
// among ids, for package sandbox and the packages beside it (manager):
// one rule, one pair of sentinel errors, which package sandbox exports as
// its ErrNotFound and ErrAmbiguous.
package ref

import (
	"errors"
	"fmt"
	"slices"
	"strings"
)

var (
	// ErrNotFound is returned for a reference that names nothing.
	ErrNotFound = errors.New("no such sandbox")
	// ErrAmbiguous is returned for a reference that matches several ids.
	ErrAmbiguous = errors.New("ambiguous sandbox reference")
)

// Error is a failed lookup: its message names what was looked up, and
// it matches ErrNotFound or ErrAmbiguous.
type Error struct {
	Msg  string
	Kind error
}

func (e *Error) Error() string { return e.Msg }

// Is reports whether e is of kind target.
func (e *Error) Is(target error) bool { return target == e.Kind }

// NotFound is an ErrNotFound whose message is msg.
func NotFound(msg string) error { return &Error{Msg: msg, Kind: ErrNotFound} }

// Resolve finds ref among ids: an exact id, else the one id it is a
// prefix of. what names the kind of id ("sandbox", "snapshot", "lease")
// in errors.
func Resolve(ref string, ids []string, what string) (string, error) {
	if ref == "" {
		return "", NotFound("empty " + what + " id")
	}
	var matches []string
	for _, id := range ids {
		if id == ref {
			return id, nil
		}
		if strings.HasPrefix(id, ref) {
			matches = append(matches, id)
		}
	}
	switch len(matches) {
	case 0:
		return "", NotFound(fmt.Sprintf("no %s %q", what, ref))
	case 1:
		return matches[0], nil
	}
	slices.Sort(matches)
	return "", &Error{Msg: fmt.Sprintf("%s id prefix %q is ambiguous: it matches %s", what, ref, strings.Join(matches, ", ")), Kind: ErrAmbiguous}
}
