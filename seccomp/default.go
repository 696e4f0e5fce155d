package seccomp

import (
	"math/bits"
	"strings"
)

// Errno values used by the default profile (x86 and arm numbering, which
// every architecture Go supports on Linux shares for these two).
const (
	errnoEPERM  = 1
	errnoENOSYS = 38
)

// allowed are the syscalls every program may make: Docker's default
// allowlist (moby/profiles seccomp/default.json) minus the calls tent denies
// (clock_adjtime*, name_to_handle_at), the calls tent allows only with
// argument checks (ioctl, socket, clone, unshare, personality) and
// socketcall, which on 32-bit x86 would multiplex around the socket()
// checks. Names of other architectures are harmless: Compile skips them.
const allowed = `
accept accept4 access adjtimex alarm bind brk cachestat capget capset
chdir chown chown32 clock_getres clock_getres_time64 clock_gettime
clock_gettime64 clock_nanosleep clock_nanosleep_time64 close close_range
connect copy_file_range dup dup2 dup3 epoll_create epoll_create1
epoll_ctl epoll_ctl_old epoll_pwait epoll_pwait2 epoll_wait
epoll_wait_old eventfd eventfd2 execve execveat exit exit_group
faccessat faccessat2 fadvise64 fadvise64_64 fallocate fanotify_mark
fchdir fchown fchown32 fchownat fcntl fcntl64
fdatasync fgetxattr flistxattr flock fork fremovexattr fsetxattr fstat
fstat64 fstatat64 fstatfs fstatfs64 fsync ftruncate ftruncate64 futex
futex_requeue futex_time64 futex_wait futex_waitv futex_wake futimesat
getcpu getcwd getdents getdents64 getegid getegid32 geteuid geteuid32
getgid getgid32 getgroups getgroups32 getitimer getpeername getpgid
getpgrp getpid getppid getpriority getrandom getresgid getresgid32
getresuid getresuid32 getrlimit get_robust_list getrusage getsid
getsockname getsockopt get_thread_area gettid gettimeofday getuid
getuid32 getxattr getxattrat inotify_add_watch inotify_init
inotify_init1 inotify_rm_watch io_cancel io_destroy io_getevents
io_pgetevents io_pgetevents_time64 ioprio_get ioprio_set io_setup
io_submit ipc kill landlock_add_rule landlock_create_ruleset
landlock_restrict_self lchown lchown32 lgetxattr link linkat listen
listmount listxattr listxattrat llistxattr _llseek lremovexattr lseek
lsetxattr lstat lstat64 madvise map_shadow_stack membarrier memfd_create
memfd_secret mincore mkdir mkdirat mlock mlock2 mlockall
mmap mmap2 mprotect mq_getsetattr mq_notify mq_open mq_timedreceive
mq_timedreceive_time64 mq_timedsend mq_timedsend_time64 mq_unlink mremap
mseal msgctl msgget msgrcv msgsnd msync munlock munlockall munmap
nanosleep newfstatat _newselect pause pidfd_open
pidfd_send_signal pipe pipe2 pkey_alloc pkey_free pkey_mprotect poll
ppoll ppoll_time64 prctl pread64 preadv preadv2 prlimit64
process_mrelease pselect6 pselect6_time64 pwrite64 pwritev pwritev2 read
readahead readlink readlinkat readv recv recvfrom recvmmsg
recvmmsg_time64 recvmsg remap_file_pages removexattr removexattrat
rename renameat renameat2 restart_syscall riscv_hwprobe rmdir rseq
rt_sigaction rt_sigpending rt_sigprocmask rt_sigqueueinfo rt_sigreturn
rt_sigsuspend rt_sigtimedwait rt_sigtimedwait_time64 rt_tgsigqueueinfo
sched_getaffinity sched_getattr sched_getparam sched_get_priority_max
sched_get_priority_min sched_getscheduler sched_rr_get_interval
sched_rr_get_interval_time64 sched_setaffinity sched_setattr
sched_setparam sched_setscheduler sched_yield seccomp select semctl
semget semop semtimedop semtimedop_time64 send sendfile sendfile64
sendmmsg sendmsg sendto setfsgid setfsgid32 setfsuid setfsuid32 setgid
setgid32 setgroups setgroups32 setitimer setpgid setpriority setregid
setregid32 setresgid setresgid32 setresuid setresuid32 setreuid
setreuid32 setrlimit set_robust_list setsid setsockopt set_thread_area
set_tid_address setuid setuid32 setxattr setxattrat shmat shmctl shmdt
shmget shutdown sigaltstack signalfd signalfd4 sigprocmask sigreturn
socketpair splice stat stat64 statfs statfs64 statmount statx
symlink symlinkat sync sync_file_range syncfs sysinfo tee tgkill time
timer_create timer_delete timer_getoverrun timer_gettime timer_gettime64
timer_settime timer_settime64 timerfd_create timerfd_gettime
timerfd_gettime64 timerfd_settime timerfd_settime64 times tkill truncate
truncate64 ugetrlimit umask uname unlink unlinkat uretprobe utime
utimensat utimensat_time64 utimes vfork vmsplice wait4 waitid waitpid
write writev
`

// denied are refused with EPERM: kernel attack surface (io_uring, bpf,
// userfaultfd, keyrings, perf), other processes (ptrace & co), the mount
// table and namespaces, and host-wide state (clock, modules, swap, reboot).
const denied = `
io_uring_setup io_uring_enter io_uring_register userfaultfd
keyctl add_key request_key bpf perf_event_open
kexec_load kexec_file_load init_module finit_module delete_module
create_module get_kernel_syms query_module
ptrace process_vm_readv process_vm_writev pidfd_getfd process_madvise kcmp
open_by_handle_at name_to_handle_at
mount umount umount2 pivot_root chroot
fsopen fsconfig fsmount fspick open_tree open_tree_attr move_mount mount_setattr
setns sethostname setdomainname
acct swapon swapoff reboot
settimeofday stime clock_settime clock_settime64 clock_adjtime clock_adjtime64
syslog vhangup quotactl quotactl_fd lookup_dcookie nfsservctl fanotify_init
iopl ioperm uselib ustat sysfs _sysctl
pciconfig_iobase pciconfig_read pciconfig_write
`

// Namespace flags of clone(2) and unshare(2).
const (
	cloneNewTime   = 0x00000080 // unshare and clone3 only: CSIGNAL in clone()
	cloneNewNS     = 0x00020000
	cloneNewCgroup = 0x02000000
	cloneNewUTS    = 0x04000000
	cloneNewIPC    = 0x08000000
	cloneNewUser   = 0x10000000
	cloneNewPID    = 0x20000000
	cloneNewNet    = 0x40000000
)

// Arguments checked by the default profile.
const (
	tiocsti   = 0x5412
	tioclinux = 0x541c

	afInet   = 2
	afInet6  = 10
	afPacket = 17
	afAlg    = 38
	afVsock  = 40
	sockRaw  = 3
	sockMask = 0xf // SOCK_TYPE_MASK: the rest are SOCK_NONBLOCK, SOCK_CLOEXEC

	low32 = 0xffffffff // int and unsigned int arguments: the kernel ignores the high half

	modeSetID  = 0o6000   // S_ISUID | S_ISGID
	oCreat     = 0o100    // O_CREAT, except on MIPS
	oCreatMIPS = 0x100    // O_CREAT on MIPS
	oTmpfile   = 0x400000 // __O_TMPFILE (O_TMPFILE without O_DIRECTORY) on every architecture Go supports
)

// modeArgs are the calls that set a file's mode from an argument, with
// that argument's index.
var modeArgs = []struct {
	name string
	mode uint
}{
	{"chmod", 1}, {"fchmod", 1}, {"fchmodat", 2}, {"fchmodat2", 2},
	{"creat", 1}, {"mknod", 1}, {"mknodat", 2},
}

// openArgs are the calls that create a file with O_CREAT or O_TMPFILE,
// with the indexes of their flags and mode arguments.
var openArgs = []struct {
	name        string
	flags, mode uint
}{{"open", 1, 2}, {"openat", 2, 3}}

// Default returns tent's built-in profile: an allowlist whose default
// action is ERRNO(ENOSYS), with explicit EPERM rules for what it denies.
// The package documentation lists the rules and their rationale. Each
// call returns a fresh copy that the caller may modify.
func Default() *Profile {
	p := &Profile{
		DefaultAction:   ActErrno,
		DefaultErrnoRet: errnoPtr(errnoENOSYS),
	}
	// The order of the rules is the profile's, as before (the
	// precompiled default_amd64.bpf is compiled from it).
	for _, rules := range [][]Syscall{baseRules(), namespaceRules(), ioctlRules(), socketRules(), setIDRules(), personalityRules()} {
		p.Syscalls = append(p.Syscalls, rules...)
	}
	return p
}

// allow is a rule allowing the call name when args match.
func allow(name string, args ...Arg) Syscall {
	return Syscall{Names: []string{name}, Action: ActAllow, Args: args}
}

// deny is a rule refusing the call name with EPERM when args match.
func deny(name string, args ...Arg) Syscall {
	return Syscall{Names: []string{name}, Action: ActErrno, ErrnoRet: errnoPtr(errnoEPERM), Args: args}
}

// baseRules are the allowed and denied calls, whatever their arguments,
// and the architecture-specific ones.
func baseRules() []Syscall {
	var out []Syscall
	add := func(s Syscall) { out = append(out, s) }
	add(Syscall{Names: strings.Fields(allowed), Action: ActAllow})
	add(Syscall{Names: strings.Fields(denied), Action: ActErrno, ErrnoRet: errnoPtr(errnoEPERM),
		Comment: "denied: kernel attack surface, other processes, mounts, namespaces, host state"})
	add(Syscall{Names: []string{"clone3"}, Action: ActErrno, ErrnoRet: errnoPtr(errnoENOSYS),
		Comment: "flags are in memory and cannot be checked; libc falls back to clone"})

	// Architecture-specific calls, as in Docker's profile.
	for _, s := range []struct{ names, arches string }{
		{"arch_prctl", "amd64 x32"},
		{"modify_ldt", "amd64 x32 x86"},
		{"sync_file_range2 swapcontext", "ppc64le"},
		{"arm_fadvise64_64 arm_sync_file_range sync_file_range2 breakpoint cacheflush set_tls", "arm arm64"},
		{"s390_pci_mmio_read s390_pci_mmio_write s390_runtime_instr", "s390 s390x"},
		{"riscv_flush_icache", "riscv64"},
	} {
		add(Syscall{Names: strings.Fields(s.names), Action: ActAllow,
			Includes: Filter{Arches: strings.Fields(s.arches)}})
	}
	return out
}

// namespaceRules refuse new namespaces to unshare and clone.
func namespaceRules() []Syscall {
	var out []Syscall
	add := func(s Syscall) { out = append(out, s) }
	// unshare and clone: no new namespaces. clone's flags are argument 0
	// except on s390, where they are argument 1. CLONE_NEWTIME cannot be
	// asked of clone(): its low byte is the exit signal.
	const nsAll = cloneNewNS | cloneNewCgroup | cloneNewUTS | cloneNewIPC |
		cloneNewUser | cloneNewPID | cloneNewNet | cloneNewTime
	nsRules := func(name string, index uint, mask uint64, f Filter, x Filter) {
		for b := mask; b != 0; b &= b - 1 {
			flag := b & -b
			s := deny(name, Arg{Index: index, Op: OpMaskedEqual, Value: flag, ValueTwo: flag})
			s.Includes, s.Excludes = f, x
			add(s)
		}
		s := allow(name, Arg{Index: index, Op: OpMaskedEqual, Value: mask, ValueTwo: 0})
		s.Includes, s.Excludes = f, x
		add(s)
	}
	s390 := Filter{Arches: []string{"s390", "s390x"}}
	nsRules("unshare", 0, nsAll, Filter{}, Filter{})
	nsRules("clone", 0, nsAll&^cloneNewTime, Filter{}, s390)
	nsRules("clone", 1, nsAll&^cloneNewTime, s390, Filter{})
	return out
}

// ioctlRules refuse the ioctls that reach beyond the terminal.
func ioctlRules() []Syscall {
	var out []Syscall
	add := func(s Syscall) { out = append(out, s) }
	// ioctl: TIOCSTI (push input into a terminal) and TIOCLINUX (console
	// selection and pasting) are denied; the command is an unsigned int,
	// so only its low 32 bits count.
	add(deny("ioctl", masked(1, low32, tiocsti)))
	add(deny("ioctl", masked(1, low32, tioclinux)))
	for _, c := range notIn(low32, tiocsti, tioclinux) {
		add(allow("ioctl", masked(1, c.mask, c.value)))
	}
	return out
}

// socketRules refuse the socket families and types of the host's network
// stack that a sandbox has no use for.
func socketRules() []Syscall {
	var out []Syscall
	add := func(s Syscall) { out = append(out, s) }
	// socket: no AF_PACKET, AF_ALG, AF_VSOCK, and no raw IPv4/IPv6
	// sockets. The family is an int; the type carries flags above bit 3.
	for _, fam := range []uint64{afPacket, afAlg, afVsock} {
		add(deny("socket", masked(0, low32, fam)))
	}
	for _, fam := range []uint64{afInet, afInet6} {
		add(deny("socket", masked(0, low32, fam), masked(1, sockMask, sockRaw)))
		for _, c := range notIn(sockMask, sockRaw) {
			add(allow("socket", masked(0, low32, fam), masked(1, c.mask, c.value)))
		}
	}
	for _, c := range notIn(low32, afInet, afInet6, afPacket, afAlg, afVsock) {
		add(allow("socket", masked(0, c.mask, c.value)))
	}
	return out
}

// setIDRules refuse set-id modes to the calls that set a mode.
func setIDRules() []Syscall {
	var out []Syscall
	add := func(s Syscall) { out = append(out, s) }
	// No setuid or setgid file from inside: a mode with S_ISUID or
	// S_ISGID is EPERM wherever a call sets one, whatever the file (the
	// filter cannot see the inode, so directories too). open and openat
	// set it only with O_CREAT or O_TMPFILE in their flags: the flags and
	// the mode are two arguments, which one rule can AND. openat2's mode
	// is in memory: ENOSYS, and callers fall back to openat.
	for _, c := range modeArgs {
		add(allow(c.name, masked(c.mode, modeSetID, 0)))
		for _, m := range notIn(modeSetID, 0) {
			add(deny(c.name, masked(c.mode, m.mask, m.value)))
		}
	}
	mips := Filter{Arches: []string{"mips", "mipsel", "mips64", "mips64el"}}
	for _, o := range []struct {
		creat              uint64
		includes, excludes Filter
	}{{oCreat, Filter{}, mips}, {oCreatMIPS, mips, Filter{}}} {
		creating := o.creat | oTmpfile
		for _, c := range openArgs {
			rules := []Syscall{allow(c.name, masked(c.flags, creating, 0))}
			for _, f := range notIn(creating, 0) {
				rules = append(rules, allow(c.name, masked(c.flags, f.mask, f.value), masked(c.mode, modeSetID, 0)))
				for _, m := range notIn(modeSetID, 0) {
					rules = append(rules, deny(c.name, masked(c.flags, f.mask, f.value), masked(c.mode, m.mask, m.value)))
				}
			}
			for _, r := range rules {
				r.Includes, r.Excludes = o.includes, o.excludes
				add(r)
			}
		}
	}
	add(Syscall{Names: []string{"openat2"}, Action: ActErrno, ErrnoRet: errnoPtr(errnoENOSYS),
		Comment: "its mode is in memory and cannot be checked; callers fall back to openat"})
	return out
}

// personalityRules allow only Docker's safe personalities.
func personalityRules() []Syscall {
	var out []Syscall
	add := func(s Syscall) { out = append(out, s) }
	// personality: Docker's safe values (PER_LINUX, UNAME26, PER_LINUX32,
	// both, and the 0xffffffff query); anything else, such as
	// ADDR_NO_RANDOMIZE or READ_IMPLIES_EXEC, is denied.
	safe := []uint64{0x0, 0x0008, 0x20000, 0x20008, 0xffffffff}
	for _, v := range safe {
		add(allow("personality", masked(0, low32, v)))
	}
	for _, c := range notIn(low32, safe...) {
		add(deny("personality", masked(0, c.mask, c.value)))
	}
	return out
}

func errnoPtr(n uint) *uint { return &n }

func masked(index uint, mask, value uint64) Arg {
	return Arg{Index: index, Op: OpMaskedEqual, Value: mask, ValueTwo: value}
}

// cylinder is the set of values x with x&mask == value.
type cylinder struct{ mask, value uint64 }

// notIn returns disjoint cylinders whose union is every x with
// x&width not in values. libseccomp cannot AND two conditions on the
// same argument, and rules with different actions must not overlap (it
// does not define which one wins), so "any value but these" is spelled as
// a union of masked-equality tests: walk the binary trie of values from
// the top bit of width down and emit each branch that holds none of them.
// It returns at most bits.OnesCount64(width)*len(values) cylinders.
func notIn(width uint64, values ...uint64) []cylinder {
	var out []cylinder
	var walk func(rest, mask, prefix uint64, set []uint64)
	walk = func(rest, mask, prefix uint64, set []uint64) {
		if len(set) == 0 {
			out = append(out, cylinder{mask, prefix})
			return
		}
		if rest == 0 {
			return // a leaf: prefix is one of values
		}
		b := uint64(1) << (bits.Len64(rest) - 1)
		var zero, one []uint64
		for _, v := range set {
			if v&b != 0 {
				one = append(one, v)
			} else {
				zero = append(zero, v)
			}
		}
		walk(rest&^b, mask|b, prefix, zero)
		walk(rest&^b, mask|b, prefix|b, one)
	}
	set := make([]uint64, 0, len(values))
	for _, v := range values {
		set = append(set, v&width)
	}
	walk(width, 0, 0, set)
	return out
}
