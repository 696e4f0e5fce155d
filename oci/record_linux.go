package oci

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"
)

// record is what create leaves in ROOT/ID/state.json for the other
// commands: the container's supervisor and where its bundle is.
type record struct {
	ID          string            `json:"id"`
	Bundle      string            `json:"bundle"`
	Rootfs      string            `json:"rootfs"`
	Pid         int               `json:"pid"`
	PidStart    uint64            `json:"pid_start"` // the supervisor's start time (clock ticks after boot)
	Created     time.Time         `json:"created"`
	Owner       string            `json:"owner"`
	Annotations map[string]string `json:"annotations,omitempty"`
	// Cgroups are the sandbox's cgroup directories and InitPID its
	// init's host pid, as the supervisor reported them.
	Cgroups []string `json:"cgroups,omitempty"`
	InitPID int      `json:"init_pid,omitempty"`
	// CgroupsPath are the directories made for linux.cgroupsPath (the
	// supervisor's cgroup), which delete removes.
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

// writeRecord writes r atomically (a temporary file, fsync, rename).
func writeRecord(root string, r *record) error {
	data, err := json.Marshal(r)
	if err != nil {
		return err
	}
	dir := containerDir(root, r.ID)
	f, err := os.CreateTemp(dir, ".state-*")
	if err != nil {
		return fmt.Errorf("failed to write the state: %w", err)
	}
	if _, err = f.Write(data); err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(f.Name(), filepath.Join(dir, "state.json"))
	}
	if err != nil {
		_ = os.Remove(f.Name())
		return fmt.Errorf("failed to write the state: %w", err)
	}
	return nil
}
