package hostcheck

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// TestHostCheckUserNSAvailability decides the tier from fake /proc trees:
// the VM's max_user_namespaces=0 (root too), Debian's knob, Ubuntu's
// AppArmor restriction for an unconfined process (not for one under a
// profile), and trial-clone errnos (a container's seccomp profile) when no
// sysctl explains them.
func TestHostCheckUserNSAvailability(t *testing.T) {
	const (
		clone  = "sys/kernel/unprivileged_userns_clone"
		max    = "sys/user/max_user_namespaces"
		aa     = "sys/kernel/apparmor_restrict_unprivileged_userns"
		label  = "self/attr/apparmor/current"
		label0 = "self/attr/current"
	)
	eperm := fmt.Errorf("fork/exec /proc/self/exe: %w", syscall.EPERM)
	tests := []struct {
		name       string
		files      map[string]string
		privileged bool
		cloneErr   error
		want       Status
		detail     string
		fix        string
	}{
		{"vm: max 0, root", map[string]string{max: "0\n"}, true, nil, Missing, "user.max_user_namespaces=0", "sysctl -w user.max_user_namespaces=15000"},
		{"vm: max 0, user", map[string]string{max: "0\n"}, false, nil, Missing, "user.max_user_namespaces=0", "sysctl -w user.max_user_namespaces"},
		{"debian knob, user", map[string]string{clone: "0\n", max: "100\n"}, false, nil, Missing, "kernel.unprivileged_userns_clone=0", "sysctl -w kernel.unprivileged_userns_clone=1"},
		{"debian knob, root", map[string]string{clone: "0\n", max: "100\n"}, true, nil, Available, "", ""},
		{"ubuntu apparmor, unconfined", map[string]string{aa: "1\n", max: "100\n", label: "unconfined\n"}, false, nil, Missing,
			"kernel.apparmor_restrict_unprivileged_userns=1", "AppArmor profile"},
		{"ubuntu apparmor, old attr file", map[string]string{aa: "1\n", label0: "unconfined\n"}, false, nil, Missing,
			"apparmor_restrict_unprivileged_userns=1", "AppArmor profile"},
		{"ubuntu apparmor, under tent's profile", map[string]string{aa: "1\n", label: "tent (unconfined)\n"}, false, nil, Available, "", ""},
		{"ubuntu apparmor, root", map[string]string{aa: "1\n", label: "unconfined\n"}, true, nil, Available, "", ""},
		{"container: clone EPERM, no sysctl", map[string]string{max: "100\n"}, false, eperm, Missing, "trial clone", "container"},
		{"clone ENOSPC with max 0", map[string]string{max: "0\n"}, false, fmt.Errorf("clone: %w", syscall.ENOSPC), Missing,
			"user.max_user_namespaces=0", "user.max_user_namespaces=15000"},
		{"clone EAGAIN is not a verdict", map[string]string{max: "100\n"}, false, syscall.EAGAIN, Available, "", ""},
		{"nothing restricts", map[string]string{max: "100\n"}, false, nil, Available, "", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := UserNSAvailability(fakeTree(t, tt.files), tt.privileged, tt.cloneErr)
			if got.Status != tt.want || !strings.Contains(got.Detail, tt.detail) || !strings.Contains(got.Fix, tt.fix) {
				t.Errorf("UserNSAvailability = %+v, want %s, detail ~%q, fix ~%q", got, tt.want, tt.detail, tt.fix)
			}
		})
	}
}

func TestHostCheckAppArmorLabel(t *testing.T) {
	for files, want := range map[*map[string]string]string{
		{"self/attr/apparmor/current": "tent (unconfined)\n"}:                          "tent",
		{"self/attr/apparmor/current": "/usr/bin/foo (enforce)\n"}:                     "/usr/bin/foo",
		{"self/attr/current": "unconfined\n"}:                                          "unconfined",
		{"self/attr/apparmor/current": "\n", "self/attr/current": "snap.x (complain)"}: "snap.x",
		{}: "unconfined",
	} {
		if got := AppArmorLabel(fakeTree(t, *files)); got != want {
			t.Errorf("AppArmorLabel(%v) = %q, want %q", *files, got, want)
		}
	}
}

func TestHostCheckUserNSCloneBlocked(t *testing.T) {
	for _, e := range []syscall.Errno{syscall.EPERM, syscall.EACCES, syscall.ENOSPC, syscall.EINVAL} {
		if !UserNSCloneBlocked(fmt.Errorf("clone: %w", e)) {
			t.Errorf("%v: not blocked", e)
		}
	}
	for _, err := range []error{nil, syscall.EAGAIN, syscall.ENOMEM, errors.New("eperm")} {
		if UserNSCloneBlocked(err) {
			t.Errorf("%v: blocked", err)
		}
	}
}

func TestHostCheckAppArmorProfile(t *testing.T) {
	got := AppArmorProfile("/usr/local/bin/tent")
	for _, want := range []string{
		"# Install as /etc/apparmor.d/tent and load it: sudo apparmor_parser -r /etc/apparmor.d/tent\n",
		"abi <abi/4.0>,\n", "include <tunables/global>\n",
		"profile tent /usr/local/bin/tent flags=(unconfined) {\n", "  userns,\n",
		"include if exists <local/tent>\n}\n",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("profile lacks %q:\n%s", want, got)
		}
	}
	if got := AppArmorProfile("/opt/my tools/tent-dev"); !strings.Contains(got, `profile tent-tent-dev "/opt/my tools/tent-dev" flags=(unconfined)`) {
		t.Errorf("profile for a spaced path:\n%s", got)
	}
}
