//go:build cgo && amd64

package namespaces

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>
#include <linux/capability.h>
#include <linux/sched.h>

#ifndef CLONE_INTO_CGROUP
#define CLONE_INTO_CGROUP 0x200000000ULL
#endif

// tent_clone is one init being started: shared, under CLONE_VM, between
// the host thread that clones and the child until it execs.
struct tent_clone {
	const char *path;
	char **argv;
	char **envp;
	int fds[4];       // the child's fds 0-3
	int cgroup_fd;    // a cgroup v2 directory to join before exec, or -1
	int in_cgroup;    // set by the host: cloned into cgroup_fd already
	int tasks[8];     // cgroup v1 tasks files to write "0" to before exec
	int ntasks;
	int set_ids;      // switch to uid/gid (a root caller's sandbox user)
	unsigned uid, gid;
	int last_cap;
	int go_pipe[2];   // the host writes a byte once the id maps are written
	int exec_pipe[2]; // close-on-exec: EOF means the child exec'd
	void *stack;
	size_t stack_size;
	int pid;
};

// tent_fail reports errno and the step that failed through exec_pipe,
// then exits: the child shares the host's memory and must not return.
static void tent_fail(struct tent_clone *c, int step) {
	int msg[2] = {errno, step};
	while (write(c->exec_pipe[1], msg, sizeof msg) < 0 && errno == EINTR) {}
	_exit(127);
}

// tent_child runs in the cloned child, on its own stack, sharing the
// host's memory: only system calls, no allocation, no locks.
static int tent_child(void *arg) {
	struct tent_clone *c = arg;
	int i;
	// The handlers are the host's (Go's), in shared memory: none may run
	// here. Every signal is blocked (inherited); reset the dispositions
	// before unblocking, as posix_spawn does.
	for (i = 1; i < NSIG; i++) {
		struct sigaction sa;
		memset(&sa, 0, sizeof sa);
		sa.sa_handler = SIG_DFL;
		if (i != SIGKILL && i != SIGSTOP)
			sigaction(i, &sa, NULL);
	}
	close(c->go_pipe[1]);
	close(c->exec_pipe[0]);
	char b;
	ssize_t n;
	do {
		n = read(c->go_pipe[0], &b, 1);
	} while (n < 0 && errno == EINTR);
	if (n != 1) {
		errno = EPIPE;
		tent_fail(c, 1);
	}
	close(c->go_pipe[0]);
	if (c->cgroup_fd >= 0 && !c->in_cgroup) {
		// Into the sandbox's cgroup before anything of the init runs (as
		// CLONE_INTO_CGROUP would put it), while this process still has
		// the caller's ids: "0" is the writer itself.
		int fd = openat(c->cgroup_fd, "cgroup.procs", O_WRONLY | O_CLOEXEC);
		if (fd < 0) tent_fail(c, 12);
		if (write(fd, "0", 1) != 1) tent_fail(c, 12);
		close(fd);
	}
	// cgroup v1: into the sandbox's cgroup in every hierarchy through the
	// tasks files the host opened. "0" to tasks moves the writer (this
	// process has one thread) without the kernel's global threadgroup
	// lock, which a pid written by the host, or cgroup.procs, takes.
	for (i = 0; i < c->ntasks; i++) {
		if (write(c->tasks[i], "0", 1) != 1) tent_fail(c, 13);
		close(c->tasks[i]);
	}
	if (c->set_ids) {
		// Keep the capabilities across the uid change (0 -> the sandbox
		// user): they are raised into the ambient set below.
		if (prctl(PR_SET_KEEPCAPS, 1, 0, 0, 0) < 0) tent_fail(c, 2);
		// Raw system calls: glibc's setgroups/setuid would broadcast to every
		// thread of the host through its (shared) thread list.
		if (syscall(SYS_setgroups, 0, NULL) < 0) tent_fail(c, 3);
		if (syscall(SYS_setresgid, c->gid, c->gid, c->gid) < 0) tent_fail(c, 4);
		if (syscall(SYS_setresuid, c->uid, c->uid, c->uid) < 0) tent_fail(c, 5);
	}
	// Every capability in the ambient set: the init keeps them across
	// execve whatever its uid inside.
	struct __user_cap_header_struct hdr = {_LINUX_CAPABILITY_VERSION_3, 0};
	struct __user_cap_data_struct data[2];
	memset(data, 0xff, sizeof data);
	if (syscall(SYS_capset, &hdr, data) < 0) tent_fail(c, 6);
	for (i = 0; i <= c->last_cap; i++)
		if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_RAISE, i, 0, 0) < 0) tent_fail(c, 7);
	if (setsid() < 0) tent_fail(c, 8);
	// fds 0-3: first above 3 (a source may sit on a target), then in place.
	int tmp[4];
	for (i = 0; i < 4; i++) {
		tmp[i] = fcntl(c->fds[i], F_DUPFD_CLOEXEC, 10);
		if (tmp[i] < 0) tent_fail(c, 9);
	}
	for (i = 0; i < 4; i++)
		if (dup3(tmp[i], i, 0) < 0) tent_fail(c, 10);
	sigset_t none;
	sigemptyset(&none);
	sigprocmask(SIG_SETMASK, &none, NULL);
	execve(c->path, c->argv, c->envp);
	tent_fail(c, 11);
	return 0;
}

// tent_clone3 is clone3(2) sharing this process's memory: the child
// starts on args->stack, calls fn(arg) and exits with its result (fn
// execs or _exits). It returns the child's pid, or -errno. glibc has no
// clone3 wrapper that takes a function: the child's first instructions,
// on a stack with no frame of this function, are written here.
static long tent_clone3(struct clone_args *args, int (*fn)(void *), void *arg) {
	long ret;
	register long r8 __asm__("r8") = (long)fn;
	register long r9 __asm__("r9") = (long)arg;
	__asm__ volatile(
		"syscall\n\t"
		"test %%rax, %%rax\n\t"
		"jnz 1f\n\t"
		// The child: rsp is the top of args->stack (16-byte aligned);
		// syscall kept every register but rax, rcx and r11.
		"xor %%ebp, %%ebp\n\t"
		"mov %%r9, %%rdi\n\t"
		"call *%%r8\n\t"
		"mov %%eax, %%edi\n\t"
		"mov $60, %%eax\n\t" // SYS_exit
		"syscall\n\t"
		"hlt\n\t"
		"1:\n\t"
		: "=a"(ret)
		: "0"((long)SYS_clone3), "D"(args), "S"(sizeof *args), "r"(r8), "r"(r9)
		: "rcx", "r11", "memory");
	return ret;
}

// tent_clone_start clones the child into flags' namespaces, sharing this
// process's memory (no copy of the page tables, no copy-on-write faults
// afterwards, unlike fork). The child waits for tent_clone_finish. With a
// cgroup v2 directory the child is cloned into it (clone3
// CLONE_INTO_CGROUP, Linux 5.7): writing "0" to cgroup.procs afterwards
// would take the kernel's global threadgroup lock, which waits for an RCU
// grace period; where clone3 fails (an older kernel, ...) the child
// writes "0" itself, as before.
static int tent_clone_start(struct tent_clone *c, int flags) {
	c->stack_size = 64 << 10;
	c->stack = mmap(NULL, c->stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (c->stack == MAP_FAILED) return -errno;
	if (pipe2(c->go_pipe, O_CLOEXEC) < 0 || pipe2(c->exec_pipe, O_CLOEXEC) < 0) {
		int e = errno;
		munmap(c->stack, c->stack_size);
		return -e;
	}
	sigset_t all, old;
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	c->pid = -1;
	int e = 0;
	if (c->cgroup_fd >= 0) {
		struct clone_args args;
		memset(&args, 0, sizeof args);
		args.flags = (unsigned long long)(unsigned)flags | CLONE_VM | CLONE_INTO_CGROUP;
		args.exit_signal = SIGCHLD;
		args.stack = (unsigned long long)(unsigned long)c->stack;
		args.stack_size = c->stack_size;
		args.cgroup = (unsigned long long)c->cgroup_fd;
		long r = tent_clone3(&args, tent_child, c);
		if (r > 0) {
			c->pid = (int)r;
			c->in_cgroup = 1; // read by the child after go_pipe
		}
	}
	if (c->pid < 0) {
		c->pid = clone(tent_child, (char *)c->stack + c->stack_size, flags | CLONE_VM | SIGCHLD, c);
		e = errno;
	}
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	close(c->go_pipe[0]);
	close(c->exec_pipe[1]);
	if (c->pid < 0) {
		close(c->go_pipe[1]);
		close(c->exec_pipe[0]);
		munmap(c->stack, c->stack_size);
		return -e;
	}
	return c->pid;
}

// tent_clone_finish lets the child go on (its id maps are written) and
// waits until it exec'd (0) or failed (-errno, *step set; it is reaped).
// Then the child's stack is freed.
static int tent_clone_finish(struct tent_clone *c, int *step) {
	char b = 1;
	int r = 0;
	while (write(c->go_pipe[1], &b, 1) < 0 && errno == EINTR) {}
	close(c->go_pipe[1]);
	int msg[2];
	ssize_t n;
	do {
		n = read(c->exec_pipe[0], msg, sizeof msg);
	} while (n < 0 && errno == EINTR);
	close(c->exec_pipe[0]);
	if (n == sizeof msg) {
		*step = msg[1];
		r = -msg[0];
		while (waitpid(c->pid, NULL, __WALL) < 0 && errno == EINTR) {}
	}
	munmap(c->stack, c->stack_size);
	return r;
}

// tent_clone_abort kills a child that never got to exec.
static void tent_clone_abort(struct tent_clone *c) {
	kill(c->pid, SIGKILL);
	close(c->go_pipe[1]);
	close(c->exec_pipe[0]);
	while (waitpid(c->pid, NULL, __WALL) < 0 && errno == EINTR) {}
	munmap(c->stack, c->stack_size);
}
*/
import "C"

import (
	"fmt"
	"os"
	"syscall"
	"unsafe"
)

// fastCloneAvailable reports whether this build can start inits with
// cloneShared.
const fastCloneAvailable = true

// cloneSteps names tent_child's steps for errors.
var cloneSteps = map[int]string{1: "waiting for the id maps", 2: "PR_SET_KEEPCAPS", 3: "setgroups", 4: "setresgid",
	5: "setresuid", 6: "capset", 7: "PR_CAP_AMBIENT_RAISE", 8: "setsid", 9: "F_DUPFD", 10: "dup3", 11: "execve",
	12: "joining its cgroup", 13: "joining its cgroup v1 hierarchies"}

// maxCgroupTasks bounds cloneShared's cgroup v1 tasks files (one per
// hierarchy: tent uses at most four).
const maxCgroupTasks = 8

// cloneShared starts path as a process in the namespaces of flags with
// fds as its 0-3, sharing this process's memory until it execs (as
// posix_spawn does) instead of forking it: a fork of a process with user
// namespace flags cannot be a vfork in Go's os/exec, and the copy-on-write
// faults it leaves behind cost this process ~100 page faults per sandbox.
// maps writes the child's uid and gid maps while it waits; the child then
// joins the cgroup v1 hierarchies whose tasks files cgroupTasks are (at
// most maxCgroupTasks, opened close-on-exec), switches to uid and gid
// (with setIDs) and execs. With a cgroup v2 directory cgroupFD (>= 0) the
// child is cloned into it (intoCgroup), or where clone3 cannot, joins it
// before everything else.
func cloneShared(path string, argv, env []string, fds [4]int, flags uintptr, cgroupFD int, cgroupTasks []int, setIDs bool, uid, gid uint32, maps func(pid int) error) (pid int, intoCgroup bool, err error) {
	if len(cgroupTasks) > maxCgroupTasks {
		return 0, false, fmt.Errorf("starting the sandbox init: %d cgroup v1 hierarchies, at most %d", len(cgroupTasks), maxCgroupTasks)
	}
	c := (*C.struct_tent_clone)(C.calloc(1, C.sizeof_struct_tent_clone))
	defer C.free(unsafe.Pointer(c))
	cpath := C.CString(path)
	defer C.free(unsafe.Pointer(cpath))
	c.path = cpath
	cargv, freeArgv := cStrings(argv)
	defer freeArgv()
	cenv, freeEnv := cStrings(env)
	defer freeEnv()
	c.argv, c.envp = cargv, cenv
	for i, fd := range fds {
		c.fds[i] = C.int(fd)
	}
	c.cgroup_fd = C.int(cgroupFD)
	for i, fd := range cgroupTasks {
		c.tasks[i] = C.int(fd)
	}
	c.ntasks = C.int(len(cgroupTasks))
	if setIDs {
		c.set_ids, c.uid, c.gid = 1, C.uint(uid), C.uint(gid)
	}
	c.last_cap = C.int(lastCap())
	// Fork-like operations and os/exec serialise on ForkLock, so that no
	// descriptor is inherited half-created.
	syscall.ForkLock.Lock()
	pid = int(C.tent_clone_start(c, C.int(flags)))
	syscall.ForkLock.Unlock()
	if pid < 0 {
		return 0, false, os.NewSyscallError("clone", syscall.Errno(-pid))
	}
	intoCgroup = c.in_cgroup != 0
	if err := maps(pid); err != nil {
		C.tent_clone_abort(c)
		return 0, false, err
	}
	var step C.int
	if r := C.tent_clone_finish(c, &step); r < 0 {
		return 0, false, fmt.Errorf("starting the sandbox init: %s: %w", cloneSteps[int(step)], syscall.Errno(-r))
	}
	return pid, intoCgroup, nil
}

// cStrings copies ss into a NULL-terminated C array.
func cStrings(ss []string) (**C.char, func()) {
	arr := (*[1 << 20]*C.char)(C.calloc(C.size_t(len(ss)+1), C.size_t(unsafe.Sizeof((*C.char)(nil)))))
	for i, s := range ss {
		arr[i] = C.CString(s)
	}
	return &arr[0], func() {
		for i := range ss {
			C.free(unsafe.Pointer(arr[i]))
		}
		C.free(unsafe.Pointer(&arr[0]))
	}
}
