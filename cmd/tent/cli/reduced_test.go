package cli

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// tent run --tier reduced: the command runs restricted, the report says
// the tier, and what the tier cannot give is refused with 125 unless
// --best-effort.
func TestCLIReducedTier(t *testing.T) {
	dir := t.TempDir()
	os.Chmod(dir, 0o777)
	rep := filepath.Join(dir, "report.json")
	secret := filepath.Join(dir, "secret")
	if err := os.WriteFile(secret, []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// Below Landlock ABI 6 (no signal scoping) the tier runs only with
	// best effort, and says so.
	reduced := []string{"run", "--tier", "reduced"}
	if weakLandlock() {
		tent(t, "run", "--tier", "reduced", "--", "true").expect(t, 125, "  - pid namespace: ", "--best-effort")
		reduced = append(reduced, "--best-effort")
	}
	r := tent(t, append(reduced, "--report", rep, "--", "sh", "-c",
		"grep -E '^(NoNewPrivs|Seccomp):' /proc/self/status; cat "+secret+" || echo denied")...)
	r.expect(t, 0)
	for _, want := range []string{"NoNewPrivs:\t1", "Seccomp:\t2", "denied"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("stdout %q lacks %q", r.stdout, want)
		}
	}
	var report struct {
		Tier        string `json:"tier"`
		Protections []struct{ Name, Status string }
	}
	data, err := os.ReadFile(rep)
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(data, &report); err != nil || report.Tier != "reduced" {
		t.Errorf("report tier %q (%v), want reduced", report.Tier, err)
	}
	tent(t, append([]string{"-v"}, append(reduced, "--", "true")...)...).expect(t, 0, "tier=reduced")

	for _, c := range []struct {
		flags   []string
		missing string
	}{
		{[]string{"--hostname", "box"}, "hostname"},
		{[]string{"--net", "limited", "--allow-host", "example.com"}, "network limited"},
		{[]string{"--cow", dir}, "cow mount " + dir},
		{[]string{"--ro", dir + ":/work"}, "mount /work"},
	} {
		args := append(append([]string{"run", "--tier", "reduced"}, c.flags...), "--", "true")
		tent(t, args...).expect(t, 125, "  - "+c.missing+": ", "--best-effort")
		if weakLandlock() {
			continue // --best-effort was checked above; the warnings differ
		}
		args = append(append([]string{"run", "--tier", "reduced", "--best-effort"}, c.flags...), "--", "true")
		tent(t, args...).expect(t, 0, "warning: "+c.missing)
	}
	tent(t, "run", "--tier", "bogus", "--", "true").expect(t, 125, "--tier", "auto, full or reduced")
	tent(t, "create", "--tier", "reduced").expect(t, 125, "cannot enforce")
}

func TestCLIReducedDoctorAppArmorProfile(t *testing.T) {
	r := tent(t, "doctor", "--apparmor-profile")
	r.expect(t, 0)
	for _, want := range []string{"apparmor_parser -r /etc/apparmor.d/", "abi <abi/4.0>,", "flags=(unconfined) {", "  userns,", "include if exists <local/"} {
		if !strings.Contains(r.stdout, want) {
			t.Errorf("profile lacks %q:\n%s", want, r.stdout)
		}
	}
}

// weakLandlock reports whether this kernel's Landlock lacks signal
// scoping (ABI < 6), which the reduced tier refuses without best effort.
func weakLandlock() bool {
	v, _, errno := syscall.Syscall(unix.SYS_LANDLOCK_CREATE_RULESET, 0, 0, unix.LANDLOCK_CREATE_RULESET_VERSION)
	return errno != 0 || v < 6
}
