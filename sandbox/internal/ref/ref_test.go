package ref

import (
	"errors"
	"testing"
)

func TestResolve(t *testing.T) {
	ids := []string{"abc1", "abc2", "abd", "x"}
	for _, c := range []struct {
		ref, want string
		err       error
	}{
		{"x", "x", nil},
		{"abd", "abd", nil},
		{"abc1", "abc1", nil},
		{"abc", "", ErrAmbiguous},
		{"ab", "", ErrAmbiguous},
		{"z", "", ErrNotFound},
		{"", "", ErrNotFound},
	} {
		got, err := Resolve(c.ref, ids, "thing")
		if got != c.want || !errors.Is(err, c.err) || (c.err == nil) != (err == nil) {
			t.Errorf("Resolve(%q) = %q, %v; want %q, %v", c.ref, got, err, c.want, c.err)
		}
	}
	if _, err := Resolve("ab", ids, "thing"); err.Error() != `thing id prefix "ab" is ambiguous: it matches abc1, abc2, abd` {
		t.Errorf("the ambiguity names every match, sorted: %v", err)
	}
}
