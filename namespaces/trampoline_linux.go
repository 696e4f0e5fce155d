package namespaces

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// trampoline rewrites an exec so that it goes through the host binary
// (reached through exeFD, an O_PATH descriptor of /proc/self/exe), which
// applies limits and then execs the command.
func trampoline(exeFD int, path string, e Exec, limits []Rlimit) (string, []string, []string, error) {
	b, err := json.Marshal(limits)
	if err != nil {
		return "", nil, nil, err
	}
	args := append([]string{ExecArg0, path}, e.Args...)
	env := append(append([]string{}, e.Env...), rlimitsEnv+"="+string(b))
	return fmt.Sprintf("/proc/self/fd/%d", exeFD), args, env, nil
}

// runTrampoline is the main of ExecArg0: argv is [ExecArg0, path,
// command argv...]. It applies the limits and execs; it returns only on
// failure, with 127 (not found) or 126 (anything else), as a shell would.
func runTrampoline() int {
	if len(os.Args) < 3 {
		fmt.Fprintln(os.Stderr, "tent: trampoline: missing command")
		return 126
	}
	var limits []Rlimit
	restrict := ""
	gated := false
	errFD := -1
	var err error
	env := make([]string, 0, len(os.Environ()))
	for _, kv := range os.Environ() {
		if v, ok := strings.CutPrefix(kv, gateEnv+"="); ok {
			if err := waitGate(v); err != nil {
				fmt.Fprintf(os.Stderr, "tent: trampoline: %v\n", err)
				return 126
			}
			gated = true
			continue
		}
		if v, ok := strings.CutPrefix(kv, execErrEnv+"="); ok {
			if errFD, err = strconv.Atoi(v); err != nil {
				errFD = -1
			}
			continue
		}
		if v, ok := strings.CutPrefix(kv, restrictEnv+"="); ok {
			restrict = v
			continue
		}
		if v, ok := strings.CutPrefix(kv, rlimitsEnv+"="); ok {
			if err := json.Unmarshal([]byte(v), &limits); err != nil {
				fmt.Fprintf(os.Stderr, "tent: trampoline: bad limits: %v\n", err)
				return 126
			}
			continue
		}
		env = append(env, kv)
	}
	if restrict != "" && gated {
		// Root of a nested user namespace whose maps were written after
		// this exec (see spawnRoot): exec again, through the host binary's
		// descriptor (fd 3), to hold that namespace's capabilities, which
		// restrictSelf then drops, bounding set included.
		// Everything but the gate goes along: the restrictions above all.
		again := slices.DeleteFunc(os.Environ(), func(kv string) bool { return strings.HasPrefix(kv, gateEnv+"=") })
		err := syscall.Exec("/proc/self/fd/3", os.Args, again)
		fmt.Fprintf(os.Stderr, "tent: trampoline: %v\n", err)
		return 126
	}
	if restrict != "" {
		// A command run as root (Exec.Root): nothing of it runs before
		// every restriction is in place.
		var err error
		if env, err = restrictSelf(restrict); err != nil {
			fmt.Fprintf(os.Stderr, "tent: trampoline: restricting the command: %v\n", err)
			errno := syscall.EPERM
			var en syscall.Errno
			if errors.As(err, &en) {
				errno = en
			}
			if errFD >= 0 {
				var b [4]byte
				binary.NativeEndian.PutUint32(b[:], uint32(errno))
				_, _ = syscall.Write(errFD, b[:])
			}
			return 126
		}
	}
	// Nothing may be allocated once the limits apply: under RLIMIT_AS (a
	// memory limit degraded to it), below the address space the Go
	// runtime has already reserved, the heap cannot grow, and the runtime
	// dies ("fatal error: runtime: out of memory"). syscall.Exec builds
	// the C arrays of argv and the environment when called, so they are
	// built here, first, with the limits' values, and execve is called
	// directly. (syscall.Exec would also hold the runtime's lock against
	// creating threads meanwhile, which this one goroutine does not do,
	// and restore the RLIMIT_NOFILE soft limit the runtime raised at
	// start, where it raised one: the command keeps the raised soft limit,
	// as every command started without the trampoline does in a cgo
	// build, whose init inherits it; a soft limit is the process's own to
	// raise up to the hard one anyway.)
	argv0, err0 := syscall.BytePtrFromString(os.Args[1])
	argv, err1 := syscall.SlicePtrFromStrings(os.Args[2:])
	envv, err2 := syscall.SlicePtrFromStrings(env)
	if err := errors.Join(err0, err1, err2); err != nil {
		fmt.Fprintf(os.Stderr, "tent: trampoline: %v\n", err)
		return 126
	}
	rl := make([]syscall.Rlimit, len(limits))
	for i, l := range limits {
		rl[i] = syscall.Rlimit{Cur: l.Cur, Max: l.Max}
	}
	for i, l := range limits {
		if err := syscall.Setrlimit(l.Resource, &rl[i]); err != nil {
			fmt.Fprintf(os.Stderr, "tent: trampoline: setrlimit(%d): %v\n", l.Resource, err)
			return 126
		}
	}
	// Only fds 0-2 reach the command: the host binary's descriptor and
	// the error pipe close as the command replaces this process.
	_ = unix.CloseRange(3, ^uint(0), unix.CLOSE_RANGE_CLOEXEC)
	_, _, errno := syscall.RawSyscall(syscall.SYS_EXECVE, uintptr(unsafe.Pointer(argv0)), uintptr(unsafe.Pointer(&argv[0])), uintptr(unsafe.Pointer(&envv[0])))
	err = errno
	if errFD >= 0 {
		// The init reports it as a failure to start, as without limits.
		var b [4]byte
		binary.NativeEndian.PutUint32(b[:], uint32(errno))
		_, _ = syscall.Write(errFD, b[:])
	} else {
		fmt.Fprintf(os.Stderr, "tent: %s: %v\n", os.Args[1], err)
	}
	if err == syscall.ENOENT {
		return 127
	}
	return 126
}

// execErrEnv names the trampoline's descriptor for the errno of a failed
// execve (the write end of a close-on-exec pipe the init reads); it is
// removed from the environment.
const execErrEnv = "TENT_EXECERR"

// gateEnv names the descriptor on which the trampoline waits before it
// execs the command (see Direct.Gate); it is removed from the environment.
const gateEnv = "TENT_GATE"

// waitGate reads one byte (or EOF) from descriptor fd and closes it.
func waitGate(fd string) error {
	n, err := strconv.Atoi(fd)
	if err != nil {
		return fmt.Errorf("bad %s %q", gateEnv, fd)
	}
	var b [1]byte
	for {
		_, err = syscall.Read(n, b[:])
		if err != syscall.EINTR {
			break
		}
	}
	syscall.Close(n)
	if err != nil {
		return fmt.Errorf("waiting for the host: %w", err)
	}
	return nil
}
