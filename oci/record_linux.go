package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
)

// record is what create leaves in ROOT/ID/state.json for the other
// commands: the container's supervisor and sandbox, and where its
// bundle is.
type record struct {
	ID     string `json:"id"`
	Bundle string `json:"bundle"`
	Rootfs string `json:"rootfs"`
	// Pid is the container's, which the shim reaps: its sandbox's init
	// (supervised.ChildLaunch.ParentReaps). Supervisor is its
	// supervisor's, Sandbox the id of the sandbox in ROOT/ID, the
	// supervised state directory.
	Pid         int               `json:"pid"`
	Supervisor  int               `json:"supervisor,omitempty"`
	Sandbox     string            `json:"sandbox"`
	Created     time.Time         `json:"created"`
	Owner       string            `json:"owner"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// UID and GID are the main process's user.
	UID uint32 `json:"uid"`
	GID uint32 `json:"gid"`
	// PodSysctls, on a pod's sandbox container, are the pod's IPC
	// sysctls, which its other containers get too (see bundle.PodSysctls).
	PodSysctls map[string]string `json:"pod_sysctls,omitempty"`
	// Cgroups are the sandbox's cgroup directories and InitPID its
	// init's host pid, as the supervisor reported them.
	Cgroups []string `json:"cgroups,omitempty"`
	InitPID int      `json:"init_pid,omitempty"`
	// CgroupsPath are the directories made for linux.cgroupsPath (the
	// supervisor's cgroup), which delete's Terminate removes.
	CgroupsPath []string `json:"cgroups_path,omitempty"`
}

// stateRoot opens (creating) the state root: a directory of ours,
// writable by no one else.
func stateRoot(root string) (string, error) {
	abs, err := filepath.Abs(root)
	if err != nil {
		return "", fmt.Errorf("--root %s: %w", root, err)
	}
	if err := os.MkdirAll(abs, 0o700); err != nil {
		return "", fmt.Errorf("failed to create the state root: %w", err)
	}
	fi, err := os.Lstat(abs)
	if err != nil {
		return "", fmt.Errorf("failed to open the state root: %w", err)
	}
	if err := checkOwned(abs, fi); err != nil {
		return "", err
	}
	return abs, nil
}

// containerDir is ROOT/ID.
func containerDir(root, id string) string { return filepath.Join(root, id) }

// readRecord reads ROOT/ID/state.json.
func readRecord(root, id string) (*record, error) {
	if err := validID(id); err != nil {
		return nil, err
	}
	dir := containerDir(root, id)
	fi, err := os.Lstat(dir)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%w: %s", ErrNotExist, id)
	}
	if err != nil {
		return nil, err
	}
	if err := checkOwned(dir, fi); err != nil {
		return nil, err
	}
	data, err := readSmall(filepath.Join(dir, "state.json"), 1<<20)
	if errors.Is(err, os.ErrNotExist) {
		// create has not finished (or failed before writing it).
		return nil, fmt.Errorf("%w: %s (no state yet)", ErrNotExist, id)
	}
	if err != nil {
		return nil, err
	}
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return nil, fmt.Errorf("state of %s: %w", id, err)
	}
	if r.ID != id || r.Pid <= 0 {
		return nil, fmt.Errorf("state of %s: malformed record", id)
	}
	return &r, nil
}

// stateTemps names the temporaries of state.json (os.CreateTemp's
// .state-DECIMAL of older versions match too).
var stateTemps = atomicfile.Options{Prefix: ".state-"}

// writeRecord writes r atomically, beneath ROOT/ID opened without
// following a symlink (atomicfile: a locked temporary beside it, fsync,
// rename, directory fsync); a killed create's temporaries go first.
func writeRecord(root string, r *record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	dir, err := os.OpenFile(containerDir(root, r.ID), os.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("failed to write the state: %w", err)
	}
	defer dir.Close()
	_, _ = stateTemps.Clean(int(dir.Fd()))
	err = atomicfile.WriteFileAt(int(dir.Fd()), "state.json", 0o600, stateTemps, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to write the state: %w", err)
	}
	return nil
}
