// Package sandbox runs untrusted commands in a Linux-native sandbox: user,
// mount, pid, ipc, uts and network namespaces, cgroup limits, Landlock
// path rules, seccomp filters and an allowlisting proxy for limited
// network access. It needs no daemon, no image and no root.
//
// # One-shot runs
//
// [Command] is shaped like os/exec's Cmd: describe the sandbox with a
// [Spec], run one command in it, and everything (processes, cgroup, cow
// layers, proxy) is gone when it ends. A non-zero exit is an [*ExitError];
// [ExitCode] maps any error to the shell's conventions, and [Cmd.Report]
// says which protections held and how.
//
// # Long-lived sandboxes
//
// [Provision] returns a [*Sandbox] that runs any number of commands,
// concurrently, until [Sandbox.Terminate]: [Sandbox.Exec] streams a
// command's output (on a terminal with [ExecRequest].TTY),
// [Sandbox.Mount] adds a mount, [Sandbox.Suspend] and [Sandbox.Resume]
// freeze and thaw it.
//
// Frontends (the tent CLI, `tent serve`'s HTTP API, an agent) use the
// [Backend] interface: the set of sandboxes (Provision, Fork, List), and
// [Backend.Open], which resolves an id, a unique prefix or a name once
// and returns a [Handle] carrying the verbs on that sandbox. [Local] runs them in
// the calling process; package sandbox/supervised runs each under a
// supervisor process of its own, durable across the caller's exit and
// shared by every process that opens the same state directory. Package
// sandbox/manager adds a warm pool, leases per client and an idle reaper
// over any Backend; package sandbox/policy reads policy files (YAML or
// JSON) and the textual forms of sizes, durations and mounts.
//
// # Processes
//
// [Handle.Start] starts a command the sandbox owns, not the caller: a
// [Process] with its real pid inside, which any caller finds again with
// [Handle.Process] (another Handle, another process of the sandbox's
// owner for package supervised) to write its stdin, read its output from
// an offset (a bounded ring per stream, which reports what it dropped),
// resize its terminal, signal it and wait for it; [Handle.Processes]
// lists them. The table and the ring are the sandbox's
// ([Sandbox.StartProcess]): in the caller's process for [Local], in the
// supervisor for package supervised. [Handle.Exec] is Start + Wait on
// the same table, its stdio the caller's (a file is handed to the
// command as it is): listed and found by pid while it runs, its record
// dropped when it returns. A process's stdin is a bounded queue
// (1 MiB unread; beyond it, [ErrStdinFull]). [Sandbox.Start] is the
// plain form, as os/exec's: a [*Job] whose stdio is the caller's, served
// until Wait.
//
// # Files
//
// The file verbs run tent's file helper inside the sandbox, with the
// sandbox's own view and restrictions: [Sandbox.ReadFile] (regular files
// only, bounded by [ReadOptions]), [Sandbox.WriteFile] (replaces a file
// as one step, committing only input whose end it was told of),
// [Sandbox.Stat], [Sandbox.ReadDir], [Sandbox.Mkdir], [Sandbox.Rename],
// [Sandbox.Remove] and [Sandbox.Watch] (a channel of [WatchEvent]s),
// each on [Handle] too; [Sandbox.File] streams archives ([FileTar],
// [FileUntar]). A path the sandbox cannot reach fails as it would inside:
// an *os.PathError with the errno, on every backend. The helper's
// answers are decoded, bounded, in one place (files_linux.go).
// A [CowLayer]'s Diff, ExportTo and WritePatch read a sandbox's copy-on-write
// layers from the host, beneath descriptors, never following the
// sandbox's symlinks.
//
// # Network
//
// [Spec].Network is mode none (loopback only; the default), host, or
// limited: connections go through tent's proxy on the host, which allows
// the hosts of the policy and nothing else. [Sandbox.SetNetworkPolicy]
// replaces a limited sandbox's rules while it runs; [ExecResult] lists
// the connections a command was refused.
//
// # Snapshots
//
// [Sandbox.Snapshot] saves a sandbox's writable layers and spec;
// [Fork] provisions new, independent sandboxes from a [Snapshot], and a
// Backend's Resume brings an ended sandbox back from its latest one.
//
// # The re-exec contract
//
// tent starts sandbox processes by re-executing the calling program
// (/proc/self/exe) with a special argv[0]. So a program that starts
// sandboxes calls [Init] first thing in main, and Init runs the mode and
// exits in those processes. The modes, each started only by tent:
//
//	argv[0]                 who starts it, with what                          exits
//	tent-init               Provision/Command: the sandbox's PID 1; its       with the sandbox
//	                        control socket and config on inherited fds
//	tent-exec               the init: applies rlimits, execs the command      (execs)
//	                        (as root, ExecRequest.AsRoot: fd 3 the binary,    126 (127: not found)
//	                        4 error pipe, 5 gate, then the Landlock ruleset,
//	                        seccomp and environment memfds; restricts itself)
//	tent-fs                 the init: the file helper of Sandbox.File         0, or 3 with an errno
//	tent-sudo-helper        the init, when a command waits at the sandbox's   0 once idle for 2 s
//	                        sudo socket (Spec.Sudo): as root, like AsRoot;
//	                        fd 0 the listening socket
//	sudo                    a command inside (Spec.Sudo), through             the command's status;
//	                        /usr/local/bin/sudo -> /run/tent/tent: the        1 when refused
//	                        client of tent-sudo-helper (only when the
//	                        binary is the one bound at /run/tent/tent)
//	tent-idle               an idle init: a C loop holding the sandbox        (execs tent-init back)
//	tent-idle-supervisor    an idle supervisor: the same, for its socket      (execs the supervisor back)
//	tent-supervisor         package supervised: fd 3 ready pipe, fd 4 the     0, or 1 after a reported
//	                        launch (JSON); argv: state dir, sandbox id.       failure; a child
//	                        A child supervisor (LaunchChild: tent-runc        supervisor: its main
//	                        create): fds 0-2 the container's stdio, 5 its     command's status
//	                        log, 6 its terminal
//	tent-supervisor-resume  tent-idle-supervisor: argv[1] options (JSON),     as tent-supervisor
//	                        argv[2] the state memfd, argv[3] the signal
//	tent-runc-exec          package oci (tent-runc exec --detach): argv[1]    the process's status; 1
//	                        the container's id; 0-2 stdio, 3 ready pipe,      after a reported failure
//	                        4 the launch (the process, JSON), 5 its terminal
//
// A program that embeds package oci (the tent binary does) also speaks
// runc's command line when argv[0]'s base name is tent-runc (see
// docs/oci.md); that is a name for users to invoke, not a re-exec mode.
// So is sudo, inside a sandbox with Spec.Sudo.
//
// The idle holders run from a cgo constructor, before the Go runtime
// exists. tent-init, tent-exec and tent-fs also start while package
// namespaces is initialised, before the packages Go initialises after it
// (every package that imports it, such as the embedding program's own,
// and those its order puts later): importing sandbox therefore exits
// those processes before main, by contract. It saves their start-up
// those initialisers (see docs/benchmarks.md), and it makes a program
// that forgets Init still work for Command and Provision. In every other process nothing exits:
// the supervisor's modes are only registered (package internal/reexec)
// and run from Init. A copy that somehow reaches the program's own main
// refuses to start sandboxes ([ErrInitMissing]).
//
// # Host requirements
//
// Linux 5.13 or later with unprivileged user namespaces gives the full
// tier: namespaces, Landlock, seccomp, and cgroup limits where cgroups are
// delegated (cgroup v2) or writable (v1). Without user namespaces the
// reduced tier runs the command with Landlock, seccomp, no_new_privs and
// rlimits and refuses what it cannot enforce ([UnsupportedError]) unless
// [Spec].BestEffort accepts the degradation. [Doctor] reports what this
// host provides. Only Linux runs sandboxes; on other systems the package
// builds and every call fails with [ErrUnsupported]. Without cgo (builds
// with CGO_ENABLED=0) there are no idle holders (idle sandboxes only trim
// their memory) and custom seccomp profiles in JSON are refused with
// ErrUnsupported; the built-in profile works.
package sandbox
