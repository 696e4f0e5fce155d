package cli

import "testing"

// tent exec's line about an OOM kill claims no more than the sandbox
// cgroup's count says: in a long-lived sandbox the kill may have been
// another command's.
func TestOOMNote(t *testing.T) {
	for _, c := range []struct {
		self, shared bool
		want         string
	}{
		{true, false, "killed by the OOM killer (memory limit 48M)"},
		{true, true, "killed by the OOM killer (memory limit 48M)"},
		{false, false, "the OOM killer killed a process of the command's tree (memory limit 48M)"},
		{false, true, "the OOM killer killed a process in the sandbox while the command ran: of its tree, or another command's (memory limit 48M)"},
	} {
		if got := oomNote(c.self, c.shared, 48<<20); got != c.want {
			t.Errorf("oomNote(%v, %v): %q, want %q", c.self, c.shared, got, c.want)
		}
	}
	if got := oomNote(false, false, 0); got != "the OOM killer killed a process of the command's tree (memory limit none)" {
		t.Errorf("no limit: %q", got)
	}
}
