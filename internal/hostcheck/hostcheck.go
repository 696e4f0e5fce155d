// Package hostcheck holds the detection logic behind `tent doctor`: it
// turns what the host exposes under /proc and /sys (and the outcome of live
// probes, passed in as values) into a [Result] with a reason and a fix.
//
// Those pure functions take the roots they read from ("/proc", "/sys" in
// production) or the data itself, so unit tests run on fake trees built in a
// temporary directory; nothing they do changes the host. The probe runners
// (ProbeUserNS, ProbeOverlay, ProbeIDMap, ...) are the live side: they
// create short-lived namespaces, a detached mount, temporary directories,
// remove them again, and feed what they saw to the pure functions.
package hostcheck

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
)

// Status is how well the host provides one protection.
type Status string

const (
	// Available: the protection works as tent uses it.
	Available Status = "available"
	// Degraded: it works with less than tent can use; Detail says what is
	// missing.
	Degraded Status = "degraded"
	// Missing: tent cannot use it on this host without --best-effort.
	Missing Status = "missing"
	// Unknown: the check could not be run (for example a helper binary is
	// absent); Detail says why.
	Unknown Status = "unknown"
)

// Result is the outcome of one check.
type Result struct {
	// Status is the verdict.
	Status Status
	// Detail is the reason, or what was found when Status is Available.
	Detail string
	// Fix is a concrete step that would make the check available; empty
	// when there is nothing to do.
	Fix string
}

// readInt reads a sysctl-style file holding one integer. ok is false when
// the file does not exist; other errors are returned.
func readInt(path string) (v int, ok bool, err error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, err
	}
	v, err = strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil {
		return 0, false, &os.PathError{Op: "parse", Path: path, Err: err}
	}
	return v, true, nil
}

// sysctlPath maps a dotted sysctl name ("user.max_user_namespaces") to its
// file under procRoot.
func sysctlPath(procRoot, name string) string {
	return filepath.Join(procRoot, "sys", filepath.FromSlash(strings.ReplaceAll(name, ".", "/")))
}
