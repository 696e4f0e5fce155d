// Package doctor checks a host for every protection tent uses (`tent
// doctor`): user namespaces, Landlock, seccomp, cgroups, overlayfs in a
// user namespace, idmapped mounts and the kernel version. It also measures
// a tent process's own start-up ([ProcessStartAge], for tent -v).
package doctor

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/tent-sandbox/tent/cgroups"
	"github.com/tent-sandbox/tent/internal/hostcheck"
)

// Check is one line of the doctor's report. The checks, in report order,
// are named "user namespaces", "landlock", "seccomp", "cgroups",
// "overlayfs in userns", "idmapped mounts" and "kernel".
type Check struct {
	Name   string `json:"name"`
	Status string `json:"status"` // "available", "degraded", "missing" (or "unknown" when a probe could not run)
	Detail string `json:"detail,omitempty"`
	Fix    string `json:"fix,omitempty"`
}

// Report is the result of [Run]: one [Check] per protection, in a
// fixed order.
type Report struct {
	Checks []Check `json:"checks"`
}

// Names of the doctor's checks, in report order.
const (
	checkUserNS   = "user namespaces"
	checkLandlock = "landlock"
	checkSeccomp  = "seccomp"
	checkCgroups  = "cgroups"
	checkOverlay  = "overlayfs in userns"
	checkIDMap    = "idmapped mounts"
	checkKernel   = "kernel"
)

// AppArmorProfile returns an AppArmor profile that lets binary (the
// absolute path of a program that starts sandboxes) create user
// namespaces where AppArmor restricts them (Ubuntu 23.10 and later), for
// /etc/apparmor.d.
func AppArmorProfile(binary string) string { return hostcheck.AppArmorProfile(binary) }

// Run checks this host for every protection tent uses: user namespaces,
// Landlock, seccomp, cgroups, overlayfs in a user namespace, idmapped mounts
// and the kernel version. It reads /proc and /sys and runs short live
// probes (child processes in new namespaces, a detached mount); it changes
// nothing lasting and leaves no process or temporary directory behind.
// Probes that need a helper binary (unshare from util-linux) report
// "unknown" when it is absent. Cancelling ctx kills running probes.
func Run(ctx context.Context) *Report {
	const procRoot, sysRoot = "/proc", "/sys"
	r := &Report{}
	add := func(name string, res hostcheck.Result) {
		r.Checks = append(r.Checks, Check{Name: name, Status: string(res.Status), Detail: res.Detail, Fix: res.Fix})
	}
	add(checkUserNS, hostcheck.ProbeUserNS(ctx, procRoot))
	add(checkLandlock, hostcheck.ProbeLandlock(sysRoot))
	add(checkSeccomp, hostcheck.ProbeSeccomp(procRoot))
	add(checkCgroups, hostcheck.ProbeCgroups(procRoot, cgroups.CanCreateFor))
	add(checkOverlay, hostcheck.ProbeOverlay(ctx))
	add(checkIDMap, hostcheck.ProbeIDMap(ctx))
	add(checkKernel, hostcheck.ProbeKernel())
	return r
}

// WriteText prints one line per check (aligned: name, status, detail) and an
// indented "fix:" line where set.
func (r *Report) WriteText(w io.Writer) error {
	nameW, statusW := 0, 0
	for _, c := range r.Checks {
		nameW = max(nameW, len(c.Name))
		statusW = max(statusW, len(c.Status))
	}
	for _, c := range r.Checks {
		line := fmt.Sprintf("%-*s  %-*s  %s", nameW, c.Name, statusW, c.Status, c.Detail)
		if _, err := fmt.Fprintln(w, strings.TrimRight(line, " ")); err != nil {
			return err
		}
		if c.Fix != "" {
			if _, err := fmt.Fprintf(w, "%*s  fix: %s\n", nameW, "", c.Fix); err != nil {
				return err
			}
		}
	}
	return nil
}
