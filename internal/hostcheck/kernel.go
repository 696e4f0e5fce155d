package hostcheck

import (
	"fmt"
	"strconv"
	"strings"
)

// Kernel versions that matter to tent.
const (
	// MinKernel is tent's minimum: mount_setattr (5.12) and openat2 (5.6).
	MinKernel = "5.12"
	// LandlockKernel is the first kernel with Landlock (5.13).
	LandlockKernel = "5.13"
)

// Kernel judges a kernel release string as uname(2) reports it (for
// example "6.1.0-18-amd64"): below 5.12 Missing (no mount_setattr), below
// 5.13 Degraded (no Landlock), else Available.
func Kernel(release string) Result {
	major, minor, ok := parseRelease(release)
	d := "Linux " + release
	switch {
	case !ok:
		return Result{Status: Unknown, Detail: fmt.Sprintf("cannot parse kernel release %q", release)}
	case major < 5 || major == 5 && minor < 12:
		return Result{Status: Missing, Detail: d + ": older than " + MinKernel + " (no mount_setattr)", Fix: "boot Linux " + MinKernel + " or newer (6.12+ for every protection)"}
	case major == 5 && minor < 13:
		return Result{Status: Degraded, Detail: d + ": older than " + LandlockKernel + " (no Landlock)", Fix: "boot Linux " + LandlockKernel + " or newer (6.12+ for every protection)"}
	}
	return Result{Status: Available, Detail: d}
}

// parseRelease returns the major and minor numbers of a release such as
// "5.12.0-rc1" or "6.18.44-fc-v769".
func parseRelease(release string) (major, minor int, ok bool) {
	f := strings.SplitN(release, ".", 3)
	if len(f) < 2 {
		return 0, 0, false
	}
	major, err := strconv.Atoi(f[0])
	if err != nil {
		return 0, 0, false
	}
	m := f[1]
	if i := strings.IndexFunc(m, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
		m = m[:i]
	}
	minor, err = strconv.Atoi(m)
	if err != nil {
		return 0, 0, false
	}
	return major, minor, true
}

// ReleaseAtLeast reports whether kernel release (as uname gives it) is
// major.minor or newer; an unparsable release is not.
func ReleaseAtLeast(release string, major, minor int) bool {
	ma, mi, ok := parseRelease(release)
	return ok && (ma > major || ma == major && mi >= minor)
}
