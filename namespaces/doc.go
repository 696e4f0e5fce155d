// Package namespaces starts a sandbox's init — the host binary re-executed
// through /proc/self/exe as PID 1 of fresh user, mount, pid, ipc, uts and
// (unless the network is shared) net namespaces — and implements that init.
//
// # The init's contract
//
// The init is recognised by argv[0] == [InitArg0]. Its file descriptor 3 is
// one end of a SOCK_SEQPACKET socket pair; everything else it needs comes
// over that socket as JSON messages, with file descriptors attached by
// SCM_RIGHTS:
//
//	host → init  config  (Config, its seccomp program as the packet's
//	             binary tail after the JSON; attached: pre-opened mounts)
//	init → host  started (pid of the command; attached: the proxy
//	             listeners — HTTP, SOCKS5 and, with Config.Transparent,
//	             the stub DNS's UDP socket and a catching listener per
//	             port of Config.CatchPorts — then, with tty set, the
//	             master of the command's terminal) | error (stage, errno)
//	host → init  signal  (for the command's foreground process group)
//	init → host  exit    (the command's wait status)
//
// A long-lived sandbox's init also takes exec (with the command's fds
// 0-2 attached, none for a terminal), kill, attach, listen (more ports to
// catch; answered with their listeners) and dial (a port of the
// sandbox's loopback, for a published port; answered with a socket still
// connecting) messages, each under an id, and answers started/error,
// done and exit under it. A wake message (from the supervisor's idle
// holder, below) and any other unknown type are ignored.
//
// The init is in the sandbox's cgroup before any of its code runs. On
// cgroup v2 it is cloned into the directory (clone3 CLONE_INTO_CGROUP;
// where that fails, the shared-memory clone's child writes "0" to
// cgroup.procs before anything else). On cgroup v1 the shared-memory
// clone joins each hierarchy before exec through the tasks file the host
// opened (Options.CgroupTasks), and on os/exec's path (builds without
// cgo, and stdio that needs copy goroutines) the host moves it before
// sending its config. A write to cgroup.procs, or of another process's
// pid to tasks, takes the kernel's global threadgroup lock and waits for
// an RCU grace period (milliseconds per start); cloning into a cgroup,
// or a process moving only itself through tasks, does not. The control socket is an
// *os.File (package net would delay the init's start; see
// internal/ctlmsg).
//
// # Signals
//
// A signal message is delivered as a terminal or a shell would: to the
// foreground process group of the command's terminal (Exec.TTY; the init
// keeps a copy of its master to ask TIOCGPGRP), else to the process group
// the command leads (it starts in a session and group of its own), else,
// when that group is gone, to the command alone. A kill message
// SIGKILLs every process of the exec's session (a shell's jobs too).
//
// The init marks itself non-dumpable and asks for SIGKILL when its parent
// dies; when the socket reaches EOF it exits, and the kernel kills every
// process of the pid namespace with it. Its exit codes: 0 after reporting
// the command's exit, [ExitSetupFailed] when setup failed (the error was
// sent first), [ExitProtocol] when the host broke the protocol.
//
// # The idle holder
//
// A long-lived sandbox's init that has had no request and no running
// command for [Config.IdleAfter] execs the host binary as the idle holder
// (argv[0] [IdleArg0]): a C constructor, linked into every cgo build, that
// takes over before the Go runtime starts, so that an idle sandbox costs
// a few hundred KiB instead of a Go process. It keeps the control socket,
// the host binary's descriptor and a memfd with the init's state; it
// marks itself non-dumpable, reaps orphans, and when a message arrives
// (it never reads one) execs the init again, which resumes from the state
// and reads the message. When the socket reaches EOF it exits.
//
// The same constructor also serves the tent CLI's per-sandbox supervisor
// (argv[0] [IdleSupervisorArg0], see [ExecSupervisorHolder]): it watches
// the supervisor's sockets, its signals and its deadline, and execs the Go
// supervisor again when one of them fires.
//
// # The command
//
// The command is forked from a dedicated OS thread of the init that first
// enters a new cgroup namespace, drops every capability (effective,
// permitted, inheritable, ambient, bounding), sets no_new_privs, enforces
// the Landlock ruleset and installs the seccomp filter — all per-thread, so
// the init itself stays unrestricted — and is then discarded. The command
// starts in its own session with exactly fds 0, 1 and 2; with Exec.TTY
// they are a new terminal of the sandbox's devpts instance, which is its
// controlling terminal. A working directory that is missing or not a
// directory is refused before the fork (stage "workdir"). With rlimits
// the command goes through the trampoline ([ExecArg0]), which reports a
// failed execve's errno on a close-on-exec pipe (its fd 4; fd 3 is the
// host binary it was started through), so a missing or non-executable
// command is a start error with or without limits.
package namespaces
