package hostcheck

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// fakeTree writes files (path relative to the root → content) under a new
// temporary directory and returns it.
func fakeTree(t *testing.T, files map[string]string) string {
	t.Helper()
	root := t.TempDir()
	for p, c := range files {
		full := filepath.Join(root, p)
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte(c), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return root
}

func TestHostCheckUserNS(t *testing.T) {
	const (
		clone = "sys/kernel/unprivileged_userns_clone"
		max   = "sys/user/max_user_namespaces"
		aa    = "sys/kernel/apparmor_restrict_unprivileged_userns"
	)
	tests := []struct {
		name     string
		files    map[string]string
		want     Status
		wantRoot Status
		detail   string
		fix      string
	}{
		{"mainline defaults", map[string]string{max: "63429\n"}, Available, Available, "no sysctl", ""},
		{"no sysctls at all", nil, Available, Available, "no sysctl", ""},
		{"debian knob on", map[string]string{clone: "1\n", max: "15000\n", aa: "0\n"}, Available, Available, "no sysctl", ""},
		{"debian knob off", map[string]string{clone: "0\n", max: "15000\n"}, Missing, Available,
			"kernel.unprivileged_userns_clone=0", "sysctl -w kernel.unprivileged_userns_clone=1"},
		{"max zero", map[string]string{clone: "1\n", max: "0\n"}, Missing, Missing,
			"user.max_user_namespaces=0", "sysctl -w user.max_user_namespaces=15000"},
		{"apparmor restriction", map[string]string{max: "15000\n", aa: "1\n"}, Missing, Available,
			"kernel.apparmor_restrict_unprivileged_userns=1", "kernel.apparmor_restrict_unprivileged_userns=0, or install an AppArmor profile"},
		{"all three", map[string]string{clone: "0\n", max: "0\n", aa: "1\n"}, Missing, Missing,
			"apparmor_restrict_unprivileged_userns=1", "user.max_user_namespaces=15000"},
		{"garbage", map[string]string{max: "lots\n"}, Unknown, Unknown, "cannot read", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			root := fakeTree(t, tt.files)
			got := UserNS(root)
			if got.Status != tt.want || !strings.Contains(got.Detail, tt.detail) || !strings.Contains(got.Fix, tt.fix) {
				t.Errorf("UserNS = %+v, want status %s, detail ~%q, fix ~%q", got, tt.want, tt.detail, tt.fix)
			}
			if tt.fix == "" && got.Fix != "" {
				t.Errorf("UserNS fix = %q, want none", got.Fix)
			}
			if got := UserNSForRoot(root); got.Status != tt.wantRoot {
				t.Errorf("UserNSForRoot = %+v, want status %s", got, tt.wantRoot)
			}
		})
	}
}

func TestHostCheckSeccomp(t *testing.T) {
	const path = "sys/kernel/seccomp/actions_avail"
	full := "kill_process kill_thread trap errno user_notif trace log allow\n"
	tests := []struct {
		name     string
		files    map[string]string
		prctlErr error
		want     Status
		detail   string
	}{
		{"all actions", map[string]string{path: full}, nil, Available, "kill_process, errno, allow"},
		{"no kill_process (4.13)", map[string]string{path: "kill trap errno trace allow\n"}, nil, Missing, "missing: kill_process"},
		{"no errno, no allow", map[string]string{path: "kill_process\n"}, nil, Missing, "missing: errno, allow"},
		{"no file", nil, nil, Missing, "does not exist"},
		{"prctl fails", map[string]string{path: full}, syscall.EINVAL, Missing, "PR_GET_SECCOMP"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Seccomp(fakeTree(t, tt.files), tt.prctlErr)
			if got.Status != tt.want || !strings.Contains(got.Detail, tt.detail) {
				t.Errorf("Seccomp = %+v, want %s with %q", got, tt.want, tt.detail)
			}
			if got.Status != Available && got.Fix == "" {
				t.Errorf("Seccomp = %+v: no fix", got)
			}
		})
	}
}

func TestHostCheckLandlock(t *testing.T) {
	sys := fakeTree(t, map[string]string{"kernel/security/lsm": "lockdown,capability,yama,apparmor\n"})
	empty := t.TempDir()
	tests := []struct {
		name   string
		abi    int
		err    error
		sys    string
		want   Status
		detail []string
		fix    string
	}{
		{"abi 7", 7, nil, empty, Available, []string{"ABI 7"}, ""},
		{"abi 6", 6, nil, empty, Available, []string{"ABI 6"}, ""},
		{"abi 5", 5, nil, empty, Degraded, []string{"ABI 5", "scoping"}, "6.12"},
		{"abi 2 (Linux 6.1)", 2, nil, empty, Degraded, []string{"ABI 2", "scoping", "ioctl", "TCP", "truncate"}, "6.12"},
		{"abi 1", 1, nil, empty, Degraded, []string{"ABI 1", "truncate", "renames"}, "6.12"},
		{"enosys", 0, fmt.Errorf("landlock: %w", syscall.ENOSYS), empty, Missing, []string{"ENOSYS", "5.13"}, "CONFIG_SECURITY_LANDLOCK"},
		{"eopnotsupp", 0, fmt.Errorf("landlock: %w", syscall.EOPNOTSUPP), sys, Missing,
			[]string{"EOPNOTSUPP", "lockdown,capability,yama,apparmor"}, "lsm=landlock,lockdown,capability,yama,apparmor"},
		{"eopnotsupp, no securityfs", 0, syscall.EOPNOTSUPP, empty, Missing, []string{"EOPNOTSUPP"}, "lsm="},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := Landlock(tt.abi, tt.err, tt.sys)
			if got.Status != tt.want || !strings.Contains(got.Fix, tt.fix) {
				t.Errorf("Landlock = %+v, want %s with fix ~%q", got, tt.want, tt.fix)
			}
			for _, d := range tt.detail {
				if !strings.Contains(got.Detail, d) {
					t.Errorf("Landlock detail %q lacks %q", got.Detail, d)
				}
			}
		})
	}
	if got := Landlock(5, nil, empty); strings.Contains(got.Detail, "truncate") {
		t.Errorf("ABI 5 claims truncate is missing: %q", got.Detail)
	}
	if !errors.Is(fmt.Errorf("x: %w", syscall.ENOSYS), syscall.ENOSYS) {
		t.Fatal("errno wrapping broken")
	}
}

func TestHostCheckKernel(t *testing.T) {
	tests := []struct {
		release string
		want    Status
	}{
		{"6.18.44-fc-v769", Available},
		{"6.1.0-18-amd64", Available},
		{"5.13.0", Available},
		{"5.12.0-rc1", Degraded},
		{"5.11.0-49-generic", Missing},
		{"4.19.0-26-amd64", Missing},
		{"3.10.0-1160.el7.x86_64", Missing},
		{"garbage", Unknown},
	}
	for _, tt := range tests {
		got := Kernel(tt.release)
		if got.Status != tt.want || !strings.Contains(got.Detail, tt.release) {
			t.Errorf("Kernel(%q) = %+v, want %s", tt.release, got, tt.want)
		}
		if (got.Status == Missing || got.Status == Degraded) && got.Fix == "" {
			t.Errorf("Kernel(%q) = %+v: no fix", tt.release, got)
		}
	}
}

func TestReleaseAtLeast(t *testing.T) {
	tests := []struct {
		release      string
		major, minor int
		want         bool
	}{
		{"6.18.44-fc-v769", 6, 3, true},
		{"6.3.0", 6, 3, true},
		{"6.1.0-18-amd64", 6, 3, false},
		{"6.1.0-18-amd64", 5, 19, true},
		{"5.19", 5, 19, true},
		{"5.15.0-91-generic", 5, 19, false},
		{"7.0.1", 6, 3, true},
		{"garbage", 0, 0, false},
	}
	for _, tt := range tests {
		if got := ReleaseAtLeast(tt.release, tt.major, tt.minor); got != tt.want {
			t.Errorf("ReleaseAtLeast(%q, %d, %d) = %v, want %v", tt.release, tt.major, tt.minor, got, tt.want)
		}
	}
}
