// Package cgroups puts one sandbox's processes in a cgroup of their own,
// limits them, and reports on, freezes and kills them as a group.
//
// # Hosts
//
// [Detect] reads /proc/self/mountinfo and /proc/self/cgroup and reports the
// host's [Mode]:
//
//   - Unified: one cgroup2 hierarchy (most current distributions).
//     Unprivileged users get a delegated subtree under systemd's
//     user@UID.service, or under `systemd-run --user -p Delegate=yes`.
//   - Hybrid: controllers on cgroup v1 hierarchies, plus a cgroup2 mount
//     (usually /sys/fs/cgroup/unified) that usually holds no controllers.
//   - Legacy: cgroup v1 only.
//
// # Choosing a version
//
// [Create] uses cgroup v2 on Unified hosts, and on Hybrid hosts whose v2
// hierarchy holds the memory controller and every controller the limits
// need. Otherwise it uses cgroup v1: one child directory per hierarchy
// (memory, pids, cpu, freezer). The sandbox cgroup is always a child of the
// caller's own cgroup, so it stays inside whatever was delegated to the
// caller, and its limits nest inside the caller's.
//
// # Kernel requirements
//
//   - cgroup v2 freezer (cgroup.freeze): Linux 5.2.
//   - CLONE_INTO_CGROUP ([Cgroup.FD] with syscall.SysProcAttr.UseCgroupFD):
//     Linux 5.7.
//   - cgroup.kill: Linux 5.14; older kernels fall back to freezing the
//     cgroup and sending SIGKILL to every listed process until none is left.
//   - memory.peak: Linux 5.19; older kernels report memory.current instead.
//   - cgroup v1 oom_kill counter in memory.oom_control: Linux 4.13.
//
// # Errors
//
// File and directory errors are *os.PathError values that keep the errno.
// Permission errors (EACCES, EPERM, EROFS), missing delegated controllers
// and v2's "no internal processes" refusal are also wrapped with
// [ErrNotDelegated], so a caller can tell the user to ask for delegation;
// the message says how.
//
// # Why not containerd/cgroups
//
// tent re-executes itself as the init of every sandbox, so each sandbox
// start pays for package initialisation of everything the binary links.
// github.com/containerd/cgroups/v3 and its dependencies (cilium/ebpf,
// go-systemd and godbus, protobuf for its stats types, logrus through
// containerd/log) measured heavy at that point, and tent needs
// a small part of it: create, limit memory, pids and CPU, read three
// counters, freeze, kill, remove. This package does that with the standard
// library and golang.org/x/sys/unix only.
package cgroups
