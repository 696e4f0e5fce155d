package hostcheck

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// SeccompActions are the filter return actions tent's profiles use, as
// /proc/sys/kernel/seccomp/actions_avail names them (Linux 4.14).
var SeccompActions = []string{"kill_process", "errno", "allow"}

// Seccomp reports whether seccomp filters with the actions tent uses work.
// prctlErr is the outcome of prctl(PR_GET_SECCOMP) in the caller (nil when
// it succeeded: the kernel has seccomp); the actions are read from
// procRoot/sys/kernel/seccomp/actions_avail.
func Seccomp(procRoot string, prctlErr error) Result {
	const fix = "boot Linux 4.14 or newer built with CONFIG_SECCOMP=y and CONFIG_SECCOMP_FILTER=y"
	if prctlErr != nil {
		return Result{Status: Missing, Detail: "prctl(PR_GET_SECCOMP) failed: " + prctlErr.Error(), Fix: fix}
	}
	path := filepath.Join(procRoot, "sys", "kernel", "seccomp", "actions_avail")
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return Result{Status: Missing, Detail: path + " does not exist: no seccomp filters, or a kernel older than 4.14", Fix: fix}
	}
	if err != nil {
		return Result{Status: Unknown, Detail: "cannot read the filter actions: " + err.Error()}
	}
	have := strings.Fields(string(data))
	var lack []string
	for _, a := range SeccompActions {
		if !slices.Contains(have, a) {
			lack = append(lack, a)
		}
	}
	if len(lack) > 0 {
		return Result{Status: Missing, Detail: "filter actions missing: " + strings.Join(lack, ", "), Fix: fix}
	}
	return Result{Status: Available, Detail: "filter actions " + strings.Join(SeccompActions, ", ")}
}
