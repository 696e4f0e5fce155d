// Package supervised runs durable, daemonless sandboxes behind the
// [sandbox.Backend] contract: each sandbox is owned by a supervisor
// process of its own, so it outlives the program that made it, and every
// process that opens the same state directory — the tent CLI, `tent
// serve`, an embedding program — sees and drives the same sandboxes.
//
// # The state directory
//
// One directory (0700, the caller's own: [ErrUnsafeStateDir] otherwise)
// holds, per sandbox, its record ID.json (written atomically: a crash
// leaves the old or the new one), the supervisor's control socket ID.sock
// and its log ID.log, and the snapshots/ directory, and the secret store
// (secrets, 0600; see [Backend.Secrets] and package secretstore): the
// values of the secrets the sandboxes' policies name, which their
// proxies ask each time a request goes out, so that none is ever in a
// record, a snapshot, a launch or a request on a socket. Names ([sandbox.Spec]
// Name) are unique per directory, checked under a lock. Records are data:
// they are read beneath the directory's descriptor, never through a
// symlink, and before acting on one (a cow layer to remove, a cgroup to
// reclaim) the backend checks it has the shape tent gives it. A record
// that cannot be read stops nothing else: see [RecordError]. The creator
// of a sandbox, then its supervisor, holds an exclusive flock on its log,
// so that [Backend.Sweep] removes what killed creates left and never a
// create in progress.
//
// # Supervisors
//
// [Backend.Provision] re-executes the calling program (/proc/self/exe) in
// the tent-supervisor mode (see the re-exec contract in package sandbox:
// the program must call sandbox.Init first), in a session of its own. The
// spec travels on a pipe, never on the command line (environment values
// are secrets); the supervisor provisions the sandbox, saves its record
// and reports ready or the refusal (its sentinel error and exit code), so
// that nothing is left behind a refusal. A supervisor serves one
// SOCK_SEQPACKET request per connection, only to its owner (or root) from
// outside every sandbox (SO_PEERCRED, the pid namespace, SO_PEERPIDFD).
// Errors cross the socket as the sentinel they were made from, so
// errors.Is(err, sandbox.ErrNotFound) holds on both sides. An exec is a
// session: the caller's descriptors are passed as they are (a terminal
// stays a terminal), resizes and signals follow, and closing the
// connection kills the command.
//
// # The service
//
// A spec's service ([sandbox.Service]: a start command and a readiness
// check) is the supervisor's to keep. In every incarnation of the sandbox
// (Provision, Fork, Resume of a stopped sandbox, a fork of a snapshot)
// the supervisor starts it as a [sandbox.Process] tagged "service"
// (listed by [Sandbox.Processes]) and waits for its check, a port inside
// that accepts or a command that exits 0, within its bound, before it
// reports ready: a service not ready by then fails the call with
// [ErrServiceNotReady], naming the check and quoting the end of the
// service's output, and leaves nothing behind. Once ready, a service
// that exits (killed, crashed) is started again, without a readiness
// wait, after a backoff that starts at 100 ms and doubles to 5 s while it
// keeps dying (a run of 10 s resets it); each restart is logged in the
// sandbox's log. While it runs, the supervisor is not idle.
//
// # Idle and crashed supervisors
//
// An idle supervisor (no request, no command, no proxied connection for
// [Options].IdleAfter) gives way to a small idle holder, a C loop of a few
// hundred KiB, which execs the supervisor again when a request comes. A
// supervisor that dies (killed, a host restart) takes its sandbox's
// processes with it; its record then reads stopped (its Reason says the
// supervisor died, or the host restarted), [Sandbox.Terminate]
// reclaims what is left (cow layers, cgroups) and [Sandbox.Resume]
// provisions the sandbox again from its latest snapshot.
package supervised
