//go:build cgo

package namespaces

/*
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define TENT_IDLE_ARG0 "tent-idle"
#define TENT_IDLE_SUPERVISOR_ARG0 "tent-idle-supervisor"
#define TENT_EXIT_PROTOCOL 121
// TENT_WAKE is the control message the supervisor's holder sends the
// init (message{Type: msgWake}, which the init ignores).
#define TENT_WAKE "{\"type\":\"wake\"}"

// tent_idle_fd parses a descriptor number; -1 when s is not one.
static int tent_idle_fd(const char *s) {
	long n = 0;
	if (*s == 0)
		return -1;
	for (; *s; s++) {
		if (*s < '0' || *s > '9' || n > 1000000)
			return -1;
		n = n * 10 + (*s - '0');
	}
	return (int)n;
}

// tent_idle_trim drops this process's mappings of clean file pages (see
// internal/memtrim, which does the same for a Go process): the lines of
// /proc/self/smaps are read through a small buffer, a mapping is dropped
// when it is backed by a file, not writable, and holds no anonymous
// (copied-on-write) page, such as relocated RELRO data.
static void tent_idle_trim(void) {
	char buf[8192], line[512];
	size_t len = 0;
	unsigned long start = 0, end = 0;
	int candidate = 0;
	int fd = open("/proc/self/smaps", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return;
	for (;;) {
		ssize_t n = read(fd, buf, sizeof buf);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		for (ssize_t i = 0; i < n; i++) {
			if (buf[i] != '\n') {
				if (len < sizeof line - 1)
					line[len++] = buf[i];
				continue;
			}
			line[len] = 0;
			len = 0;
			// A mapping's header: "start-end perms offset dev inode [path]".
			char *p = line, *q;
			unsigned long s = 0, e = 0;
			int hex = 0;
			for (q = p; (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f'); q++, hex++)
				s = s * 16 + (unsigned long)(*q <= '9' ? *q - '0' : *q - 'a' + 10);
			if (hex > 0 && *q == '-') {
				for (q++; (*q >= '0' && *q <= '9') || (*q >= 'a' && *q <= 'f'); q++)
					e = e * 16 + (unsigned long)(*q <= '9' ? *q - '0' : *q - 'a' + 10);
				if (*q == ' ') {
					char *perms = q + 1;
					// Skip perms, offset, dev and inode to the path.
					int fields = 0;
					for (q = perms; *q && fields < 4; q++)
						if (*q == ' ') {
							fields++;
							while (q[1] == ' ')
								q++;
						}
					start = s;
					end = e;
					candidate = perms[1] != 'w' && *q == '/';
					continue;
				}
			}
			if (candidate && strncmp(line, "Anonymous:", 10) == 0) {
				long kb = 0;
				for (q = line + 10; *q == ' '; q++) {}
				for (; *q >= '0' && *q <= '9'; q++)
					kb = kb * 10 + (*q - '0');
				if (kb == 0 && end > start)
					madvise((void *)start, end - start, MADV_DONTNEED);
				candidate = 0;
			}
		}
	}
	close(fd);
}

// tent_idle is the idle holder: a long-lived sandbox's init that has had
// nothing to do for a while execs the host binary with argv
// {TENT_IDLE_ARG0, control fd, binary fd, state fd}, and this constructor
// takes over before the Go runtime exists. As PID 1 it reaps orphans; it
// never reads the control socket.
// When a message arrives there it execs the Go init again (argv {"tent-init",
// "resume", state fd}), which reads that message; when the host is gone it
// exits, and the kernel kills the sandbox's processes with it.
// tent_idle_supervisor is the idle holder of a CLI sandbox's supervisor
// (see sandbox.SuperviseOptions): argv is {TENT_IDLE_SUPERVISOR_ARG0,
// deadline, wake fd or "-", fd..., "--", binary fd, argv of the Go
// supervisor...}. It waits until one of the fds is readable or hung up,
// the deadline (ms since the epoch, 0 for none) passes, or SIGTERM,
// SIGINT, SIGHUP or SIGCHLD arrives, then execs the Go supervisor with
// one argument more: the number of the signal that woke it (SIGTERM,
// SIGINT, SIGHUP), or 0. Woken by a watched fd other than the wake fd (a
// client, a proxied connection), it first sends TENT_WAKE on the wake fd
// (the init's control socket), so that an idle init's holder starts the
// Go init while the Go supervisor starts, instead of after it.
static void tent_idle_supervisor(int argc, char **argv, char **envp) {
	int sep = -1;
	for (int i = 3; i < argc; i++)
		if (strcmp(argv[i], "--") == 0) {
			sep = i;
			break;
		}
	int wake = -1;
	if (argc > 2 && strcmp(argv[2], "-") != 0 && (wake = tent_idle_fd(argv[2])) < 0)
		_exit(TENT_EXIT_PROTOCOL);
	int nfds = sep - 3;
	if (sep < 0 || nfds < 1 || nfds > 16 || sep + 2 >= argc)
		_exit(TENT_EXIT_PROTOCOL);
	long long deadline = 0;
	for (const char *c = argv[1]; *c; c++) {
		if (*c < '0' || *c > '9')
			_exit(TENT_EXIT_PROTOCOL);
		deadline = deadline * 10 + (*c - '0');
	}
	int exe = tent_idle_fd(argv[sep + 1]);
	struct pollfd p[17];
	for (int i = 0; i < nfds; i++) {
		p[i].fd = tent_idle_fd(argv[3 + i]);
		p[i].events = POLLIN;
		if (p[i].fd < 0)
			_exit(TENT_EXIT_PROTOCOL);
	}
	if (exe < 0)
		_exit(TENT_EXIT_PROTOCOL);
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigaddset(&set, SIGHUP);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		_exit(TENT_EXIT_PROTOCOL);
	p[nfds].fd = sfd;
	p[nfds].events = POLLIN;
	tent_idle_trim();
	int reason = 0;
	for (;;) {
		int timeout = -1;
		if (deadline > 0) {
			struct timespec now;
			clock_gettime(CLOCK_REALTIME, &now);
			long long left = deadline - ((long long)now.tv_sec * 1000 + now.tv_nsec / 1000000);
			timeout = left <= 0 ? 0 : left > 1000000000 ? 1000000000 : (int)left;
		}
		int n = poll(p, nfds + 1, timeout);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break; // the deadline (or a failed poll: let the Go side look)
		struct signalfd_siginfo si;
		while (read(sfd, &si, sizeof si) == sizeof si)
			if (si.ssi_signo != SIGCHLD)
				reason = (int)si.ssi_signo;
		int poke = wake >= 0;
		for (int i = 0; i < nfds; i++)
			if (p[i].fd == wake && p[i].revents != 0)
				poke = 0; // the init has something to say: it is awake
		int other = 0;
		for (int i = 0; i < nfds; i++)
			if (p[i].fd != wake && (p[i].revents & POLLIN))
				other = 1;
		if (poke && other && reason == 0)
			send(wake, TENT_WAKE, sizeof TENT_WAKE - 1, MSG_DONTWAIT | MSG_NOSIGNAL);
		break;
	}
	close(sfd);
	sigemptyset(&set);
	sigprocmask(SIG_SETMASK, &set, NULL);
	int n = argc - (sep + 2);
	char *args[n + 2];
	for (int i = 0; i < n; i++)
		args[i] = argv[sep + 2 + i];
	char why[16];
	int len = 0;
	char digits[16];
	int v = reason, d = 0;
	do {
		digits[d++] = (char)('0' + v % 10);
		v /= 10;
	} while (v > 0);
	while (d > 0)
		why[len++] = digits[--d];
	why[len] = 0;
	args[n] = why;
	args[n + 1] = NULL;
	// The Go supervisor opens the binary again when it needs it.
	fcntl(exe, F_SETFD, FD_CLOEXEC);
	syscall(SYS_execveat, exe, "", args, envp, AT_EMPTY_PATH);
	_exit(TENT_EXIT_PROTOCOL);
}

// tent_start_ns is CLOCK_MONOTONIC when this process's constructors ran:
// its exec and the C library's start done, the Go runtime not yet
// started (see processStartNS).
static long long tent_start_ns;

static long long tent_process_start(void) { return tent_start_ns; }

static void tent_idle(int argc, char **argv, char **envp);

#ifdef __GLIBC__
// glibc passes its constructors main's arguments.
__attribute__((constructor)) static void tent_start(int argc, char **argv, char **envp) {
	tent_idle(argc, argv, envp);
}
#else
extern char **environ;

// Other C libraries (musl) pass constructors nothing. The process's
// initial stack (System V ABI) holds argc, argv[0..argc-1], NULL, then the
// environment, where environ still points when constructors run: counting
// back from environ, the first word equal to its distance is argc (argv's
// entries are pointers, never such small numbers). Past the kernel's
// bound on arguments (ARG_MAX / sizeof(char *)), something moved environ
// first: no arguments then, which no holder takes.
__attribute__((constructor)) static void tent_start(void) {
	char **e = environ;
	long argc = 0;
	while (argc < (1 << 21) / (long)sizeof(char *) && (long)e[-2 - argc] != argc)
		argc++;
	if ((long)e[-2 - argc] != argc) {
		tent_idle(0, e - 1, e);
		return;
	}
	tent_idle((int)argc, e - argc - 1, e);
}
#endif

static void tent_idle(int argc, char **argv, char **envp) {
	struct timespec now;
	if (clock_gettime(CLOCK_MONOTONIC, &now) == 0)
		tent_start_ns = (long long)now.tv_sec * 1000000000LL + now.tv_nsec;
	if (argc > 0 && strcmp(argv[0], TENT_IDLE_SUPERVISOR_ARG0) == 0)
		tent_idle_supervisor(argc, argv, envp);
	if (argc != 5 || strcmp(argv[0], TENT_IDLE_ARG0) != 0)
		return;
	// As the Go init does: exec made this process dumpable again.
	prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
	prctl(PR_SET_PDEATHSIG, SIGKILL, 0, 0, 0);
	int ctl = tent_idle_fd(argv[1]), exe = tent_idle_fd(argv[2]), state = tent_idle_fd(argv[3]);
	// The sandbox's sudo listener ("-1": none): a connection waiting on
	// it wakes the init, which starts the sudo helper.
	int sudo = tent_idle_fd(argv[4]);
	if (ctl < 0 || exe < 0 || state < 0)
		_exit(TENT_EXIT_PROTOCOL);
	// Children's exits arrive on a signalfd. Other signals need nothing:
	// as PID 1 of its pid namespace, with default dispositions, the
	// holder is sent none but SIGKILL and SIGSTOP (from the host).
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	int sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
	if (sfd < 0)
		_exit(TENT_EXIT_PROTOCOL);
	tent_idle_trim();
	for (;;) {
		while (waitpid(-1, NULL, WNOHANG | __WALL) > 0) {}
		struct pollfd p[3] = {{.fd = ctl, .events = POLLIN}, {.fd = sfd, .events = POLLIN}, {.fd = sudo, .events = POLLIN}};
		if (poll(p, sudo >= 0 ? 3 : 2, -1) < 0) {
			if (errno == EINTR)
				continue;
			_exit(TENT_EXIT_PROTOCOL);
		}
		struct signalfd_siginfo si;
		while (read(sfd, &si, sizeof si) > 0) {}
		if (p[0].revents & POLLIN)
			break;
		if (sudo >= 0 && (p[2].revents & POLLIN))
			break;
		if (p[0].revents & (POLLHUP | POLLERR | POLLNVAL))
			_exit(TENT_EXIT_PROTOCOL);
	}
	// SIGCHLD was consumed above; the Go init starts with no signal
	// blocked (its commands would inherit the mask).
	close(sfd);
	sigemptyset(&set);
	sigprocmask(SIG_SETMASK, &set, NULL);
	char *args[] = {"tent-init", "resume", argv[3], NULL};
	syscall(SYS_execveat, exe, "", args, envp, AT_EMPTY_PATH);
	_exit(TENT_EXIT_PROTOCOL);
}
*/
import "C"

// processStartNS is CLOCK_MONOTONIC (ns) when this process's C
// constructors ran, before the Go runtime started; 0 when unknown.
func processStartNS() int64 { return int64(C.tent_process_start()) }

// holderAvailable reports whether this build has the idle holder (the C
// constructor above, which runs before the Go runtime).
const holderAvailable = true

// holderArg0 is the holder's argv[0], as the C side spells it.
const holderArg0 = C.TENT_IDLE_ARG0

// supervisorHolderArg0 is the supervisor holder's argv[0], as the C side
// spells it.
const supervisorHolderArg0 = C.TENT_IDLE_SUPERVISOR_ARG0

// holderWake is the message the supervisor holder sends the init.
const holderWake = C.TENT_WAKE
