package namespaces

import (
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// The sandbox's sudo (Config.Sudo). A command runs `sudo CMD` (tent's
// binary, bound read-only at SudoBinary and reached through the symlink
// /usr/local/bin/sudo): that client connects to SudoSocket and hands over
// the command, its environment, its directory and its stdio descriptors.
// The init holds the listening socket and only watches it: when a
// connection waits and no helper runs, it starts the helper (SudoHelperArg0)
// as root of a nested user namespace, exactly as Exec.Root starts any
// command (no capability, no_new_privs, Landlock, seccomp, rlimits), with
// the listener as its stdin. The helper accepts connections and runs each
// command as its child, so with its identity and restrictions and nothing
// more, relays the client's signals to it, kills it when the client goes
// away, reports its wait status, and exits once no connection has come for
// sudoHelperLinger. The init itself never reads what a sandbox sends.
const (
	// SudoDir is the sandbox directory (a tmpfs the sandbox cannot write)
	// holding SudoBinary, SudoSocket and the link directory SudoBinDir.
	SudoDir = "/run/tent"
	// SudoBinary is where tent's binary is bound, read-only.
	SudoBinary = SudoDir + "/tent"
	// SudoSocket is the socket the sudo client connects to.
	SudoSocket = SudoDir + "/sudo.sock"
	// SudoBinDir holds the symlink sudo -> SudoBinary, joined to
	// /usr/local/bin (SudoPathDir) by a read-only union mount so that
	// sudo is found ahead of any host sudo by every PATH (login shells'
	// included).
	SudoBinDir = SudoDir + "/bin"
	// SudoPathDir is the directory of PATH where sudo appears.
	SudoPathDir = "/usr/local/bin"
	// SudoHelperArg0 is the helper's argv[0].
	SudoHelperArg0 = "tent-sudo-helper"
)

// sudoHelperLinger is how long the helper waits for another connection
// once it has none.
const sudoHelperLinger = 2 * time.Second

// sudoRequestTimeout bounds the wait for a client's request.
const sudoRequestTimeout = 10 * time.Second

// maxSudoRequest bounds a request (arguments and environment).
const maxSudoRequest = 4 << 20

// sudoRequest is what the client sends, once, after a 4-byte length,
// with its descriptors 0-2 (SCM_RIGHTS) on the first byte. After it the
// client sends signal numbers (4 bytes each) to deliver to the command;
// the helper answers with the command's wait status (4 bytes).
type sudoRequest struct {
	Path string   `json:"path"`
	Args []string `json:"args"`
	Env  []string `json:"env"`
	Dir  string   `json:"dir"`
}

// isSudo reports whether this process is the sandbox's sudo: invoked as
// sudo, and the binary bound at SudoBinary (so that a host binary merely
// named sudo never is).
func isSudo() bool {
	if len(os.Args) == 0 || (os.Args[0] != "sudo" && !strings.HasSuffix(os.Args[0], "/sudo")) {
		return false
	}
	exe, err := os.Readlink("/proc/self/exe")
	return err == nil && exe == SudoBinary
}

// sudoFail prints sudo's kind of message and returns sudo's failure
// status, 1.
func sudoFail(format string, a ...any) int {
	fmt.Fprintf(os.Stderr, "sudo: "+format+"\n", a...)
	return 1
}

// sudoUsage is the client's help.
const sudoUsage = `usage: sudo [-EHinks] [-u root] [--] [VAR=value...] [command [arg...]]
tent's sudo runs the command as root of a user namespace nested in the
sandbox's: root in its own view, with no privilege the sandbox's user lacks.
  -E, --preserve-env   keep the whole environment
  -H, --set-home       HOME=/root (always so)
  -i, --login          run root's login shell (with the command, if any)
  -s, --shell          run $SHELL (with the command, if any)
  -n, --non-interactive, -k, -K  accepted (there is never a password)
  -u, --user root|0    the only user tent's sudo runs commands as
  -v, --validate       succeed (there is never a password)
  -h, --help, -V, --version`

// runSudo is the client's main; it returns the exit status.
func runSudo(argv []string) int {
	a := sudoArgs{argv: argv}
	if code, done := a.parse(); done {
		return code
	}
	rest := argv[a.i:]
	var assign []string
	for len(rest) > 0 {
		k, _, ok := strings.Cut(rest[0], "=")
		if !ok || k == "" || strings.ContainsAny(k, "/ \t") {
			break
		}
		assign = append(assign, rest[0])
		rest = rest[1:]
	}
	env := sudoEnv(os.Environ(), a.preserve)
	env = append(env, assign...)
	args, dir, code, done := a.command(rest)
	if done {
		return code
	}
	path, err := lookPath(args[0], env)
	if err != nil {
		return sudoFail("%s: command not found", args[0])
	}
	env = append(env, "SUDO_COMMAND="+strings.Join(append([]string{path}, args[1:]...), " "))
	return sudoCall(sudoRequest{Path: path, Args: args, Env: env, Dir: dir})
}

// sudoArgs reads the sudo client's options: argv, the next one's index
// i, and what they ask for.
type sudoArgs struct {
	argv                          []string
	i                             int
	preserve, login, shell, reset bool
}

// parse reads the options at the start of argv, leaving i at the first
// operand. done reports that sudo has nothing more to do (help, version,
// -v, a refused option), with its exit code.
func (a *sudoArgs) parse() (code int, done bool) {
	for ; a.i < len(a.argv); a.i++ {
		arg := a.argv[a.i]
		if arg == "--" {
			a.i++
			break
		}
		if !strings.HasPrefix(arg, "-") || arg == "-" {
			break
		}
		if strings.HasPrefix(arg, "--") {
			if code, done := a.long(arg[2:]); done {
				return code, true
			}
			continue
		}
		if code, done := a.short(arg[1:]); done {
			return code, true
		}
	}
	return 0, false
}

// long reads the long option opt (without its dashes), as parse does.
func (a *sudoArgs) long(opt string) (code int, done bool) {
	name, val, hasVal := strings.Cut(opt, "=")
	switch name {
	case "preserve-env":
		if hasVal {
			return sudoFail("--preserve-env=LIST is not supported by tent's sudo; use -E"), true
		}
		a.preserve = true
	case "set-home", "non-interactive":
	case "reset-timestamp", "remove-timestamp":
		a.reset = true
	case "login":
		a.login = true
	case "shell":
		a.shell = true
	case "user":
		if !hasVal {
			if a.i+1 >= len(a.argv) {
				return sudoFail("option '--user' requires an argument"), true
			}
			a.i++
			val = a.argv[a.i]
		}
		if code := sudoUser(val); code != 0 {
			return code, true
		}
	case "validate":
		return 0, true
	case "help":
		fmt.Println(sudoUsage)
		return 0, true
	case "version":
		fmt.Println("tent's sudo (root of a nested user namespace)")
		return 0, true
	default:
		return sudoFail("option --%s is not supported by tent's sudo\n%s", name, sudoUsage), true
	}
	return 0, false
}

// short reads the short options of flags (one argument, without its
// dash), as parse does.
func (a *sudoArgs) short(flags string) (code int, done bool) {
	for j := 0; j < len(flags); j++ {
		switch c := flags[j]; c {
		case 'E':
			a.preserve = true
		case 'H', 'n':
		case 'k', 'K':
			a.reset = true
		case 'i':
			a.login = true
		case 's':
			a.shell = true
		case 'v':
			return 0, true
		case 'h':
			fmt.Println(sudoUsage)
			return 0, true
		case 'V':
			fmt.Println("tent's sudo (root of a nested user namespace)")
			return 0, true
		case 'u':
			val := flags[j+1:]
			if val == "" {
				if a.i+1 >= len(a.argv) {
					return sudoFail("option requires an argument -- 'u'"), true
				}
				a.i++
				val = a.argv[a.i]
			}
			if code := sudoUser(val); code != 0 {
				return code, true
			}
			j = len(flags)
		default:
			return sudoFail("option -%c is not supported by tent's sudo\n%s", c, sudoUsage), true
		}
	}
	return 0, false
}

// command returns the command line to run for the operands rest (a
// login or plain shell with -i or -s) and its directory; done reports
// that there is none to run, with sudo's exit code.
func (a *sudoArgs) command(rest []string) (args []string, dir string, code int, done bool) {
	dir, err := os.Getwd()
	if err != nil {
		dir = "/"
	}
	sh := "/bin/sh"
	if _, err := os.Stat("/bin/bash"); err == nil {
		sh = "/bin/bash"
	}
	switch {
	case a.login:
		if fi, err := os.Stat("/root"); err == nil && fi.IsDir() {
			dir = "/root"
		} else {
			fmt.Fprintln(os.Stderr, "sudo: unable to change directory to /root: it does not exist in this sandbox")
		}
		args = []string{sh, "-l"}
		if len(rest) > 0 {
			args = append(args, "-c", shellJoin(rest))
		}
	case a.shell:
		if s := os.Getenv("SHELL"); s != "" {
			sh = s
		}
		args = []string{sh}
		if len(rest) > 0 {
			args = append(args, "-c", shellJoin(rest))
		}
	case len(rest) == 0 && a.reset:
		return nil, "", 0, true // sudo -k: there is no timestamp to forget
	case len(rest) == 0:
		fmt.Fprintln(os.Stderr, sudoUsage)
		return nil, "", 1, true
	default:
		args = rest
	}
	return args, dir, 0, false
}

// sudoUser accepts root (by name or id) and refuses any other user.
func sudoUser(u string) int {
	switch u {
	case "root", "0", "#0":
		return 0
	}
	return sudoFail("unknown user %s: tent's sudo runs commands as root only", u)
}

// sudoEnv is sudo's env_reset: a clean environment with PATH (Debian's
// secure_path), HOME, USER, LOGNAME, SHELL, SUDO_USER, SUDO_UID,
// SUDO_GID, the terminal and locale variables and tent's proxy
// variables (the sandbox's way out in limited mode); with preserve (-E)
// the whole environment, with the identity variables set.
func sudoEnv(cur []string, preserve bool) []string {
	get := func(k string) (string, bool) {
		for _, kv := range cur {
			if v, ok := strings.CutPrefix(kv, k+"="); ok {
				return v, true
			}
		}
		return "", false
	}
	name, ok := get("USER")
	if !ok || name == "" || name == "root" {
		name = strconv.Itoa(os.Getuid())
	}
	set := map[string]string{
		"HOME": "/root", "USER": "root", "LOGNAME": "root", "SHELL": "/bin/bash",
		"SUDO_USER": name, "SUDO_UID": strconv.Itoa(os.Getuid()), "SUDO_GID": strconv.Itoa(os.Getgid()),
	}
	if _, err := os.Stat("/bin/bash"); err != nil {
		set["SHELL"] = "/bin/sh"
	}
	var env []string
	if preserve {
		delete(set, "HOME")
		delete(set, "SHELL")
		for _, kv := range cur {
			k, _, _ := strings.Cut(kv, "=")
			if _, over := set[k]; !over && k != "SUDO_COMMAND" {
				env = append(env, kv)
			}
		}
	} else {
		set["PATH"] = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
		for _, kv := range cur {
			k, _, _ := strings.Cut(kv, "=")
			if sudoKeep(k) {
				env = append(env, kv)
			}
		}
	}
	for _, k := range []string{"PATH", "HOME", "USER", "LOGNAME", "SHELL", "SUDO_USER", "SUDO_UID", "SUDO_GID"} {
		if v, ok := set[k]; ok {
			env = append(env, k+"="+v)
		}
	}
	return env
}

// sudoKeep reports whether env_reset keeps variable k.
func sudoKeep(k string) bool {
	switch k {
	case "TERM", "COLORTERM", "COLORS", "DISPLAY", "LANG", "LANGUAGE", "TZ", "LS_COLORS",
		"HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY", "http_proxy", "https_proxy", "all_proxy", "no_proxy",
		"SSL_CERT_FILE", "SSL_CERT_DIR", "NODE_EXTRA_CA_CERTS", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "GIT_SSL_CAINFO", "TENT_CA_CERT":
		return true
	}
	return strings.HasPrefix(k, "LC_")
}

// shellJoin quotes args for sh -c.
func shellJoin(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
	}
	return strings.Join(q, " ")
}

// sudoCall sends req with this process's stdio to the helper, relays
// signals, and returns the command's status (128+N for signal N, after
// trying to die of N as sudo does).
func sudoCall(req sudoRequest) int {
	fd, err := unix.Socket(unix.AF_UNIX, unix.SOCK_STREAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		return sudoFail("%v", os.NewSyscallError("socket", err))
	}
	conn := os.NewFile(uintptr(fd), "sudo")
	defer conn.Close()
	if err := unix.Connect(fd, &unix.SockaddrUnix{Name: SudoSocket}); err != nil {
		return sudoFail("cannot reach tent's sudo helper at %s: %v", SudoSocket, err)
	}
	b, err := json.Marshal(req)
	if err != nil || len(b) > maxSudoRequest {
		return sudoFail("the command and its environment are too large (at most %d bytes)", maxSudoRequest)
	}
	msg := binary.LittleEndian.AppendUint32(nil, uint32(len(b)))
	if err := unix.Sendmsg(fd, msg, unix.UnixRights(0, 1, 2), nil, 0); err != nil {
		return sudoFail("%v", os.NewSyscallError("sendmsg", err))
	}
	if _, err := conn.Write(b); err != nil {
		return sudoFail("sending the command: %v", err)
	}
	sigs := make(chan os.Signal, 8)
	relayed := []os.Signal{unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH}
	signal.Notify(sigs, relayed...)
	var mu sync.Mutex
	go func() {
		for s := range sigs {
			mu.Lock()
			_, _ = conn.Write(binary.LittleEndian.AppendUint32(nil, uint32(s.(syscall.Signal))))
			mu.Unlock()
		}
	}()
	var st [4]byte
	if _, err := io.ReadFull(conn, st[:]); err != nil {
		return sudoFail("tent's sudo helper ended without the command's status (%v)", err)
	}
	signal.Stop(sigs)
	ws := unix.WaitStatus(binary.LittleEndian.Uint32(st[:]))
	switch {
	case ws.Exited():
		return ws.ExitStatus()
	case ws.Signaled():
		sig := ws.Signal()
		signal.Reset(sig)
		_ = unix.Kill(os.Getpid(), sig)
		time.Sleep(10 * time.Millisecond)
		return 128 + int(sig)
	}
	return 1
}
