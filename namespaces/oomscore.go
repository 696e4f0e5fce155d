package namespaces

// CommandOOMScoreAdj is how much higher a sandbox's commands' OOM score
// adjustment is than their init's (capped at 1000, the kernel's maximum;
// 1000 itself when the init's is 0): when the sandbox reaches its memory
// limit, the kernel's OOM killer takes a command before the init. Without
// it the init, a Go program of several MiB resident (tens under the race
// detector), was the first victim among a command's many small processes,
// and the whole sandbox died with it (a shell starting forty 2 MB
// subshells under a 48 MiB limit). The kernel adds score/1000 of the
// memory limit to a process's resident size when it picks: a gap of 1000
// puts every command ahead of an init smaller than the limit, where 500
// did not (the race-instrumented init, 32 MiB under 48, was still picked).
// Under the host's own memory pressure, likewise, a sandbox's commands go
// first, as Kubernetes' best-effort pods do.
//
// The init cannot lower its own score (that needs CAP_SYS_RESOURCE on the
// host, and a privileged write would also let every command lower its own
// score that far, below the host's other processes). It never raises its
// own either: it once did, around each fork, for the command to inherit
// the raised score, and an OOM kill in the sandbox while it forked (the
// fork waits for the command's exec, which under memory pressure is
// slow) took the init, raised and the largest process, and the sandbox
// with it. A command's score cannot be written between its fork and its
// exec: it shares the init's memory map until then, and a write to one
// process sharing a map is a write to all (and the init, non-dumpable,
// could not open the child's /proc files anyway). So the init writes it
// just after the exec, before it reports the command started, then
// writes it to whatever the command forked before that, which inherited
// the init's (a shell's first job, at most 64 processes).
// The rlimit trampoline and a command run as root (Exec.Root) wait for
// the init after their exec, so theirs is written before the command
// runs at all. Commands cannot write /proc (Landlock); could they, they
// could lower their score only down to the init's.
const CommandOOMScoreAdj = 1000
