// Package fs plans and builds a sandbox's filesystem view and the Landlock
// rules that mirror it.
//
// # Plan, then apply
//
// [NewPlan] validates the caller's mounts and turns them, together with the
// host's system directories, into a [Plan]: an ordered list of steps (bind,
// tmpfs, proc, devpts, symlink). Building a plan has no side effects and
// needs no privileges, so tests check it as data. [Plan.Apply] executes it
// inside the sandbox's own mount namespace and ends with pivot_root.
//
// # Safety of mount targets
//
// Targets are validated before anything is created: absolute, clean, no
// "..", not reserved ("/", "/proc", "/dev", "/sys" and below), no
// duplicates. Apply creates every missing directory of a target relative to
// file descriptors of the new root with openat2(RESOLVE_BENEATH |
// RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS), and attaches mounts with
// move_mount on those descriptors, so a symlink planted inside one mounted
// source can never redirect a later target onto the host: the attempt fails
// with ELOOP. Sources are opened with open_tree(OPEN_TREE_CLONE) before the
// new root exists, and every clone is made private ([MakePrivate]), as is
// the new root: a clone of a shared mount would otherwise be a peer of the
// host's, and the sandbox's mounts would appear in the host's mount table
// (and the host's new mounts in the sandbox). Linux 5.12 is the minimum
// (mount_setattr, openat2).
//
// # Landlock
//
// [LandlockRules] derives the rule set from a plan: read and execute
// everywhere visible, write only beneath rw mounts, /tmp, $HOME, /dev/shm
// and the character devices in /dev. [Ruleset] negotiates it down to the
// running kernel's ABI and reports the level reached.
//
// # Files by job
//
//   - Mount plan: plan.go, mount.go, source_linux.go, cgroupview.go,
//     gitguard*.go (validation and steps); apply_linux.go (Apply),
//     newmount_linux.go (new tmpfs, proc, overlays), harden_linux.go and
//     bootid_linux.go (read-only, masked and /proc paths),
//     mountpoint_linux.go (mount points beneath the new root),
//     attach_linux.go and idmap*.go (mounts into a running sandbox,
//     idmapped clones), private_linux.go (clones made private),
//     overlay_idmap_linux.go and overlay_options_linux.go (an image's
//     overlay rootfs rebuilt over idmapped lower layers, for the OCI
//     runtime: [OpenIDMappedOverlay]); landlock*.go.
//
// Two subpackages build on fs, which imports neither: fs/files is the
// in-sandbox file helper (the re-executed "tent-fs" mode behind the
// sandbox's file verbs), and fs/layer the writable layers (diffs,
// exports, patches, archives) with the descriptor-relative walk, the
// sparse copy and the tar archive they are built on, which the file
// helper's tar and untar ops use too.
package fs
