package manager

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"slices"
	"strings"

	"github.com/tent-sandbox/tent/sandbox"
)

// refError is a failed lookup by id or prefix: its message names what was
// looked up, and it matches sandbox.ErrNotFound or sandbox.ErrAmbiguous.
type refError struct {
	msg  string
	kind error
}

func (e *refError) Error() string        { return e.msg }
func (e *refError) Is(target error) bool { return target == e.kind }

// resolveRef finds ref among ids: an exact id, else the one id it is a
// prefix of. what names the kind of id ("sandbox", "lease") in errors.
func resolveRef(ref string, ids []string, what string) (string, error) {
	if ref == "" {
		return "", &refError{msg: "empty " + what + " id", kind: sandbox.ErrNotFound}
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
		return "", &refError{msg: fmt.Sprintf("no %s %q", what, ref), kind: sandbox.ErrNotFound}
	case 1:
		return matches[0], nil
	}
	slices.Sort(matches)
	return "", &refError{msg: fmt.Sprintf("%s id prefix %q is ambiguous: it matches %s", what, ref, strings.Join(matches, ", ")), kind: sandbox.ErrAmbiguous}
}

// newLeaseID returns a fresh random lease id (16 hex digits).
func newLeaseID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
