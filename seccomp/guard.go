package seccomp

// Guard selects the restrictions of a guard profile: a small filter that
// stands in for a namespace when a command runs without one (tent's
// reduced tier, where user namespaces are unavailable). It is meant to be
// installed in addition to the command's own profile: stacked seccomp
// filters all run and the most restrictive verdict wins, so the guard only
// ever removes access.
type Guard struct {
	// NoNetwork replaces an empty network namespace: socket(2) fails with
	// EPERM for every address family except AF_UNIX (so no AF_INET,
	// AF_INET6, AF_NETLINK, AF_PACKET, AF_VSOCK ... sockets), and
	// io_uring_setup fails with EPERM (IORING_OP_SOCKET, Linux 5.19, would
	// create sockets without socket(2)). socketpair(2) is untouched: it
	// only makes AF_UNIX pairs. Sockets passed in already open are not
	// affected, which is why tent hands a command only fds 0-2.
	NoNetwork bool
	// NoIPC replaces an IPC namespace: every System V IPC call (msgget,
	// msgsnd, msgrcv, msgctl, semget, semop, semtimedop, semctl, shmget,
	// shmat, shmdt, shmctl) and mq_open/mq_unlink fail with EPERM, so the
	// command cannot reach the host's message queues, semaphores and
	// shared memory segments (whose keys and ids are global to the IPC
	// namespace and guessable). POSIX shared memory in /dev/shm is files,
	// governed by Landlock instead.
	NoIPC bool
}

// afUnix is AF_UNIX (AF_LOCAL), the one family NoNetwork allows.
const afUnix = 1

// sysvIPC are the System V IPC and POSIX message queue calls NoIPC
// denies. Names of other architectures (ipc on 32-bit x86) are skipped by
// Compile; the bad-architecture action kills foreign ABIs anyway.
var sysvIPC = []string{
	"msgget", "msgsnd", "msgrcv", "msgctl",
	"semget", "semop", "semtimedop", "semtimedop_time64", "semctl",
	"shmget", "shmat", "shmdt", "shmctl",
	"mq_open", "mq_unlink", "ipc",
}

// GuardProfile returns the profile for g: default action ALLOW, with an
// ERRNO(EPERM) rule for each restriction g selects. [GuardProgram]
// returns it compiled; install it with the command's own filter. With
// nothing selected the profile allows everything (and need not be
// installed).
func GuardProfile(g Guard) *Profile {
	p := &Profile{DefaultAction: ActAllow}
	eperm := func(names []string, args ...Arg) Syscall {
		return Syscall{Names: names, Action: ActErrno, ErrnoRet: errnoPtr(errnoEPERM), Args: args}
	}
	if g.NoNetwork {
		// The family is an int: only its low 32 bits count. "Anything but
		// AF_UNIX" is a union of masked-equality tests (see notIn).
		for _, c := range notIn(low32, afUnix) {
			p.Syscalls = append(p.Syscalls, eperm([]string{"socket"}, masked(0, c.mask, c.value)))
		}
		p.Syscalls = append(p.Syscalls, eperm([]string{"io_uring_setup"}))
	}
	if g.NoIPC {
		p.Syscalls = append(p.Syscalls, eperm(sysvIPC))
	}
	return p
}
