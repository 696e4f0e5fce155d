// Package oci is tent's OCI runtime frontend: it speaks runc's command
// line, so that containerd's stock io.containerd.runc.v2 shim (ctr run
// --runc-binary, a runtime handler's BinaryName, Kubernetes through a
// RuntimeClass) and other runc callers run containers as tent sandboxes.
// The tent binary enters it when invoked as [Arg0] (a symlink named
// tent-runc); see docs/oci.md for the install and the differences from
// runc.
//
// # Processes
//
// runc's shim learns exit statuses by reaping: it is a child subreaper,
// runs `create`, and waits for the pid that create wrote to --pid-file.
// So create starts, as its own child, a supervisor (argv[0]
// tent-runc-supervisor; the tent binary re-executed) that provisions the
// sandbox (its init is the supervisor's child), listens on ROOT/ID/sock
// and reports "ok" on a pipe; create then writes the supervisor's pid
// and exits, leaving it to the shim. Nothing of the bundle's runs until
// `start`: the supervisor then runs the bundle's process in the sandbox
// with its own stdio (create's, which the shim set up) and exits with
// the process's status (its code, or 128+N for signal N), after
// tearing the sandbox down. `exec --detach` does the same through an
// exec helper (tent-runc-exec): it hands its stdio to the supervisor,
// forwards the signals it receives (the shim signals exec'd processes
// by pid) and exits with the process's status; if it dies, the
// supervisor kills the process.
//
// Both get what they run — the container's paths; an exec's process,
// its arguments and environment — as their launch: JSON that their
// starter writes on an inherited pipe, fd 4, and closes. Never on their
// command line (every local user reads /proc/PID/cmdline) nor in their
// environment: argv is the mode and the container's id.
//
//	argv                     started by       fds                            exits
//	tent-runc-supervisor ID  create           0-2 container stdio,           the main process's status;
//	                                          3 ready pipe, 4 launch,        1 if the sandbox failed
//	                                          5 terminal
//	tent-runc-exec ID        exec --detach    0-2 stdio, 3 ready pipe,       the process's status;
//	                                          4 launch, 5 terminal           1 if it did not start
//
// With a terminal, create (or exec) opens a pseudo-terminal on the host,
// sends its master to --console-socket and gives the slave to the
// supervisor (or helper) as its controlling terminal; the supervisor
// relays it to a terminal inside the sandbox and forwards resizes
// (SIGWINCH).
//
// # State
//
// ROOT (--root, default /run/tent-runc) holds a directory per container,
// 0700, with state.json (written atomically once the supervisor is
// ready) and the supervisor's socket, which accepts peers of its own
// uid only. A supervisor is known by its pid and start time, so a reused
// pid is never taken for it.
package oci
