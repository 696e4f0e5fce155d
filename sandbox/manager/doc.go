// Package manager hands sandboxes of one or more [sandbox.Backend]s to
// clients, as an agent platform's sandbox service does. A Backend
// provisions, runs commands in and terminates sandboxes; a [Manager]
// adds, over its backends:
//
//   - backend choice: each request's [Selection] names the capabilities
//     it needs, and the first backend that has them all provisions;
//   - a warm pool ([Options].Pool): sandboxes of given specs provisioned
//     ahead, so that [Manager.Acquire] of an equal spec takes one at once
//     and the pool refills in the background; a sandbox is handed out at
//     most once, never returned to the pool;
//   - leases: a [Lease] is one client's hold on one sandbox, named by its
//     own id, with labels, attached or detached. Acquire gives a client a
//     sandbox, [Manager.Join] lets another client join it, and releasing
//     the last lease terminates the sandbox;
//   - an idle reaper: a sandbox nobody uses (idle while attached, left
//     detached, suspended) is terminated once its [Timeouts] run out;
//   - statistics ([Stats]): sandboxes created and active, leases by state,
//     pool hits and misses, provisioning time, timeout kills.
//
// The manager owns the sandboxes it provisions: Close terminates them
// all. It does not wrap every Backend method: [Manager.Lookup] returns a
// lease's backend and sandbox for the rest.
package manager
