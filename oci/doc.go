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
// up) as the container's, and it clones the sandbox's init as create's
// child too (CLONE_PARENT: supervised.ChildLaunch.ParentReaps). create
// writes the init's pid, as runc writes its container process's, and
// exits, leaving both to the shim: the pid the shim reaps, enters and
// watches (its cgroup's metrics and OOM events) is in the container.
// Nothing of the bundle's runs until `start` (Sandbox.StartMain). When
// the process ends, the supervisor tells the init to exit with its
// status (its code, or 128+N for signal N; the kernel first kills the
// rest of the container), removes what the sandbox had on the host and
// exits with the same status. state, kill, pause, resume, ps, exec and
// delete are requests on its socket (package supervised's protocol, peer
// check and sentinel errors); delete waits for a stopped container's
// supervisor to finish. `exec --detach` runs through an exec helper
// (tent-runc-exec), whose pid the shim reaps and signals: it runs the
// exec over the supervisor's socket with its own stdio, forwards the
// signals it receives and exits with the process's status; if it dies,
// its connection closes and the supervisor kills the process.
//
// A bundle that names a network or an IPC namespace (a CRI pod's) gets
// its supervisor started in it, from a thread that joined it, and the
// sandbox keeps it: a pod's containers share its network and its System
// V IPC. An IPC namespace must be a container's (not owned by the host's
// user namespace).
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
//	tent-init parent-reaps   the supervisor   see package namespaces         the main process's status
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
// ready): the bundle, the owner, the annotations, the container's pid
// (its init's), the supervisor's and the sandbox's id.
package oci
