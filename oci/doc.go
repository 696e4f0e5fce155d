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
// So create launches the container's sandbox through package
// supervised's child supervisor (supervised.Backend.LaunchChild): the
// supervisor is create's child, with create's stdio (which the shim set
// up) as the container's, and create writes its pid and exits, leaving
// it to the shim. Nothing of the bundle's runs until `start`
// (Sandbox.StartMain); the supervisor then exits with the process's
// status (its code, or 128+N for signal N), after tearing the sandbox
// down. state, kill, pause, resume, ps, exec and delete are requests on
// its socket (package supervised's protocol, peer check and sentinel
// errors). `exec --detach` runs through an exec helper
// (tent-runc-exec), whose pid the shim reaps and signals: it runs the
// exec over the supervisor's socket with its own stdio, forwards the
// signals it receives and exits with the process's status; if it dies,
// its connection closes and the supervisor kills the process.
//
// What they run — the container's spec and process; an exec's process,
// its arguments and environment — travels on inherited pipes (fd 4) and
// the supervisor's socket, never on a command line (every local user
// reads /proc/PID/cmdline) nor in an environment: argv is the mode and
// the container's id (the exec helper), or the state directory and the
// sandbox's id (the supervisor).
//
//	argv                     started by       fds                            exits
//	tent-supervisor DIR SID  create           see package supervised         the main process's status
//	tent-runc-exec ID        exec --detach    0-2 stdio, 3 ready pipe,       the process's status;
//	                                          4 launch, 5 terminal           1 if it did not start
//
// With a terminal, create (or exec) opens a pseudo-terminal on the host,
// sends its master to --console-socket and gives the slave to the
// supervisor (or helper) as its controlling terminal; the process runs
// on a terminal inside the sandbox that the supervisor relays to it,
// with its resizes (SIGWINCH).
//
// # State
//
// ROOT (--root, default /run/tent-runc) holds a directory per container,
// 0700, which is the supervised state directory of its sandbox (the
// sandbox's record, its supervisor's socket and log) and holds
// tent-runc's state.json (written atomically once the supervisor is
// ready): the bundle, the owner, the annotations, the supervisor's pid
// and the sandbox's id.
package oci
