// Package seccomp builds the seccomp filter that tent installs in every
// sandboxed command right before execve.
//
// The work is split as elsewhere in tent: a Profile is plain data, Compile
// turns it into a Program (classic BPF, no side effects, testable without
// privileges), and Program.Install loads it in one small function. The
// host compiles once and ships the program to the sandbox's init with
// Program.Marshal and UnmarshalProgram.
//
// # Profiles
//
// A Profile is an OCI runtime-spec or Docker seccomp profile in JSON:
// defaultAction, defaultErrnoRet, architectures, archMap and syscalls, each
// rule with names (or the older name), action, errnoRet, args (index,
// value, valueTwo, op) and Docker's includes/excludes (arches, caps,
// minKernel). Parse and Load validate it and name the offending field in
// their errors, which wrap ErrInvalidProfile; unknown JSON fields are
// ignored, unknown actions and operators are errors. Docker's published
// default profile loads and compiles unchanged.
//
// Compile selects rules for the process that will run them: the native
// architecture, the running kernel (for minKernel) and no capabilities,
// since tent drops every capability before execve. So a Docker rule that
// includes CAP_SYS_ADMIN is dropped and one that excludes it is kept.
// Syscall names libseccomp does not know are skipped, as Docker and runc
// do. Several args on the same index are alternatives (runc's reading),
// because libseccomp cannot AND two conditions on one argument.
//
// Only the native ABI is compiled. Anything else, including the i386
// (int $0x80) and x32 ABIs of an x86-64 process, meets the filter's
// bad-architecture action, KILL_PROCESS; architectures and archMap are
// validated but do not widen the filter. SCMP_ACT_NOTIFY is rejected by
// Compile: tent runs no notification listener.
//
// # The default profile
//
// Default is an allowlist in the spirit of Docker's default profile, with
// default action ERRNO(ENOSYS):
//
//   - Allowed: Docker's list of ordinary calls (file I/O, memory, signals,
//     threads, futexes, epoll, sockets, time, IPC, landlock_* and seccomp so
//     a process can restrict itself further), plus arch_prctl and
//     modify_ldt on x86 as Docker does.
//   - EPERM, because they widen the kernel's attack surface or reach past
//     the sandbox: io_uring_*, userfaultfd, bpf, perf_event_open, keyctl,
//     add_key, request_key; ptrace, process_vm_readv/writev, pidfd_getfd,
//     process_madvise, kcmp; open_by_handle_at, name_to_handle_at; mount,
//     umount2, pivot_root, chroot and the new mount API (fsopen, fsconfig,
//     fsmount, fspick, open_tree, move_mount, mount_setattr); setns,
//     sethostname, setdomainname; kernel modules and kexec; acct, swapon,
//     swapoff, reboot, settimeofday, clock_settime, clock_adjtime, syslog,
//     vhangup, quotactl, iopl, ioperm and obsolete calls (lookup_dcookie,
//     nfsservctl, uselib, ustat, sysfs, _sysctl, ...).
//   - ENOSYS: clone3. Its flags live in memory, where a filter cannot see
//     them; C libraries fall back to clone, whose flags can be checked.
//   - clone and unshare: allowed unless the flags ask for a namespace
//     (CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC, NEWUSER, NEWPID, NEWNET, and
//     NEWTIME for unshare), which is EPERM. A nested user namespace would
//     hand the command capabilities over fresh namespaces and expose more
//     kernel code.
//   - ioctl: TIOCSTI (typing into the controlling terminal) and TIOCLINUX
//     are EPERM, everything else allowed. The command is compared on its
//     low 32 bits, as the kernel reads it, so 0xffffffff00005412 is denied
//     too.
//   - socket: AF_PACKET, AF_ALG, AF_VSOCK and raw AF_INET/AF_INET6 sockets
//     (type & 0xf == SOCK_RAW, whatever SOCK_NONBLOCK/SOCK_CLOEXEC say) are
//     EPERM; AF_UNIX, AF_NETLINK, TCP/UDP and the rest are allowed.
//   - No set-user-ID or set-group-ID file can be made from inside: chmod,
//     fchmod, fchmodat, fchmodat2, creat, mknod and mknodat with a mode
//     that has S_ISUID or S_ISGID (mode & 06000, whatever the file type
//     bits and the bits above the 16 the kernel reads) are EPERM; so are
//     open and openat with O_CREAT or O_TMPFILE (__O_TMPFILE, 0x400000;
//     O_CREAT is 0100, 0x100 on MIPS) in their flags and such a mode.
//     Without those flags the kernel ignores the mode, and so does the
//     filter. A sandbox's writable mounts are nosuid inside, but not on
//     the host: a setuid file written there would run with its owner's
//     ids (a root caller's rw mount used to make that owner host root)
//     for any local user who executes it, and a setgid one with its
//     group's. The filter cannot see the inode, so the rule covers
//     directories too: chmod g+s on a directory, and coreutils chmod on
//     an already set-gid directory (it passes the bit it preserves), are
//     EPERM. mkdir and mkdirat stay allowed with any mode: the kernel
//     keeps only mkdir's permission and sticky bits, so a directory gets
//     S_ISGID only by inheriting it from a host directory that has it,
//     and a set-gid directory lets no one gain anything by executing it.
//     File capabilities need no rule: writing security.capability needs
//     CAP_SETFCAP, which commands do not hold (and the clone and unshare
//     rules keep them from a nested user namespace that would grant it).
//   - ENOSYS: openat2. Its mode lives in memory, where a filter cannot
//     see it; C libraries do not use it for open, and programs that do
//     (and Go's os.Root, which uses openat) fall back to openat.
//   - personality: the values Docker allows (0, UNAME26 0x8, PER_LINUX32
//     0x20000, both, and the 0xffffffff query) pass; anything else, such as
//     ADDR_NO_RANDOMIZE, is EPERM.
//
// "Any value but these" cannot be one libseccomp condition, and rules with
// different actions must not overlap (libseccomp does not say which wins),
// so the allowed remainder of ioctl, socket, personality and the
// mode-setting calls is written as
// disjoint masked-equality rules (a flags test and a mode test on two
// arguments are ANDed in one rule). Default's rules are therefore many, but
// the compiled filter is about 1,100 instructions and libseccomp lays out
// syscall numbers as a binary tree.
//
// # Errno contract
//
// Under Default a command sees exactly three outcomes besides success: a
// syscall tent denies fails with EPERM (an explicit rule, never the
// default); a syscall the profile does not know, such as one newer than
// the profile or than libseccomp, or one whose arguments live in memory
// (clone3, openat2), fails with ENOSYS, which C libraries and runtimes
// treat as "not implemented here" and fall back from (clone3 to clone,
// openat2 to openat, fchmodat2 to fchmodat); and a syscall of a foreign
// ABI kills the whole process with SIGSYS.
//
// # Kernel facts
//
//   - A filter is per thread. Install uses seccomp(SECCOMP_SET_MODE_FILTER)
//     without SECCOMP_FILTER_FLAG_TSYNC, so only the calling thread is
//     filtered; callers lock the goroutine to its thread and execve from
//     it. Threads and children created afterwards inherit the filter, and
//     it survives execve; it cannot be removed.
//   - Installing needs no_new_privs on the thread (or CAP_SYS_ADMIN);
//     without it the kernel answers EACCES.
//   - seccomp(2) exists since Linux 3.17; SECCOMP_RET_KILL_PROCESS since
//     4.14. Since 5.11 the kernel caches syscalls a filter always allows
//     and skips the filter for them.
//   - A program holds at most 4096 instructions (MaxInstructions).
//   - Compile needs cgo and libseccomp 2.3.1 or newer (Debian 12 ships
//     2.5.4). From 2.5 on, syscalls are laid out as a binary tree; before
//     2.6, the program is exported through a memfd. Built without cgo,
//     Compile only validates and fails with an error wrapping
//     errors.ErrUnsupported; DefaultProgram and GuardProgram need no
//     compiler on x86-64, where they are precompiled (go generate).
//     Program, Compile and Install exist only on Linux; profiles parse
//     anywhere.
package seccomp
