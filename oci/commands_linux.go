package oci

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	specs "github.com/opencontainers/runtime-spec/specs-go"
	"golang.org/x/sys/unix"
)

// run dispatches one runc command.
func run(ctx context.Context, g *globals, cmd string, args []string) (int, error) {
	switch cmd {
	case "create":
		return 0, g.create(ctx, args)
	case "start":
		return 0, g.simple(cmd, args, "start")
	case "pause":
		return 0, g.simple(cmd, args, "pause")
	case "resume":
		return 0, g.simple(cmd, args, "resume")
	case "state":
		return 0, g.state(args)
	case "kill":
		return 0, g.kill(args)
	case "delete":
		return 0, g.delete(args)
	case "exec":
		return g.exec(ctx, args)
	case "ps":
		return 0, g.ps(args)
	case "update":
		return 0, g.update(args)
	case "features":
		return 0, g.features()
	case "list":
		return 0, g.list(args)
	case "checkpoint", "restore", "run", "spec", "events", "init":
		return 1, fmt.Errorf("%s: %w (tent-runc implements create, start, state, kill, delete, exec, ps, pause, resume, features, list)", cmd, ErrUnsupportedCommand)
	}
	return 1, fmt.Errorf("unknown command %q", cmd)
}

// pipeMessage reads what a child reports on its ready pipe: "ok" or an
// error, up to its end (the child closes it, or dies).
func pipeMessage(ctx context.Context, r *os.File) (string, error) {
	_ = r.SetReadDeadline(time.Now().Add(2 * time.Minute))
	data, err := io.ReadAll(io.LimitReader(r, 64<<10))
	if err != nil {
		return "", err
	}
	return string(data), ctx.Err()
}

// writePidFile writes pid to path atomically (as runc does: a temporary
// file beside it, renamed).
func writePidFile(path string, pid int) error {
	if path == "" {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	tmp := filepath.Join(filepath.Dir(abs), "."+filepath.Base(abs)+".tmp")
	if err := os.WriteFile(tmp, []byte(strconv.Itoa(pid)), 0o600); err != nil {
		return fmt.Errorf("failed to write the pid file: %w", err)
	}
	if err := os.Rename(tmp, abs); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("failed to write the pid file: %w", err)
	}
	return nil
}

func (g *globals) create(ctx context.Context, args []string) (err error) {
	var bundleDir, pidFile, console string
	var preserve int
	fl, err := commandFlags("create", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&bundleDir, "bundle", ".", "")
		fl.StringVar(&bundleDir, "b", ".", "")
		fl.StringVar(&pidFile, "pid-file", "", "")
		fl.StringVar(&console, "console-socket", "", "")
		fl.Bool("no-pivot", false, "")
		fl.Bool("no-new-keyring", false, "")
		fl.IntVar(&preserve, "preserve-fds", 0, "")
	})
	if err != nil {
		return err
	}
	id, err := oneID("create", fl.Args())
	if err != nil {
		return err
	}
	if preserve != 0 {
		return fmt.Errorf("create: --preserve-fds: %w (the container gets its stdio only)", ErrUnsupportedCommand)
	}
	root, err := stateRoot(g.root)
	if err != nil {
		return err
	}
	// The bundle is checked here too, so that a bad one fails before
	// anything is made.
	b, err := loadBundle(bundleDir)
	if err != nil {
		return err
	}
	switch {
	case b.Main.Terminal && console == "":
		return errors.New("create: process.terminal is set: --console-socket is required to receive the terminal")
	case !b.Main.Terminal && console != "":
		return errors.New("create: --console-socket given but process.terminal is not set")
	}
	dir := containerDir(root, id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("container with id %s already exists", id)
		}
		return fmt.Errorf("failed to create the container's state: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()

	readyR, readyW, err := os.Pipe()
	if err != nil {
		return err
	}
	defer readyR.Close()
	l := launch{Root: root, ID: id, Bundle: b.Dir, Log: g.log, LogFormat: g.logFormat, Debug: g.debug, Terminal: b.Main.Terminal}
	arg, _ := json.Marshal(l)
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{supervisorArg0, string(arg)},
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{readyW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	var master, slave *os.File
	if b.Main.Terminal {
		if master, slave, err = openPTY(); err != nil {
			readyW.Close()
			return err
		}
		defer master.Close()
		defer slave.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, slave)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 4
	}
	err = startIn(cmd, b.NetNS, b.Sysctls)
	readyW.Close()
	if err != nil {
		return fmt.Errorf("failed to start the container's supervisor: %w", err)
	}
	msg, rerr := pipeMessage(ctx, readyR)
	var info readyInfo
	if rest, ok := strings.CutPrefix(msg, "ok\n"); ok && json.Unmarshal([]byte(rest), &info) == nil {
		msg = "ok"
	}
	if msg != "ok" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if msg == "" && rerr != nil {
			msg = rerr.Error()
		}
		if msg == "" {
			msg = "the container's supervisor ended without a report"
		}
		return errors.New(msg)
	}
	start, err := pidStart(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return fmt.Errorf("the container's supervisor: %w", err)
	}
	owner := ""
	if u, uerr := user.LookupId(strconv.Itoa(os.Geteuid())); uerr == nil {
		owner = u.Username
	}
	rec := &record{ID: id, Bundle: b.Dir, Rootfs: b.Spec.Root.Path, Pid: cmd.Process.Pid, PidStart: start,
		Created: time.Now().UTC(), Owner: owner, Annotations: b.Config.Annotations, Cgroups: info.Cgroups, InitPID: info.InitPID, CgroupsPath: info.CgroupsPath}
	err = writeRecord(root, rec)
	if err == nil && master != nil {
		err = sendConsole(console, master)
	}
	if err == nil {
		err = writePidFile(pidFile, cmd.Process.Pid)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return err
	}
	// The supervisor is left to our parent (the shim, a subreaper).
	_ = cmd.Process.Release()
	return nil
}

// simple sends one request without arguments (start, pause, resume).
func (g *globals) simple(name string, args []string, op string) error {
	fl, err := commandFlags(name, g, args, func(*flag.FlagSet) {})
	if err != nil {
		return err
	}
	id, err := oneID(name, fl.Args())
	if err != nil {
		return err
	}
	rec, err := readRecord(g.root, id)
	if err != nil {
		return err
	}
	if !rec.alive() {
		return fmt.Errorf("%s: container %s is stopped", name, id)
	}
	_, err = call(g.root, id, request{Op: op}, deadline)
	return err
}

// stateJSON is runc's `state` output.
type stateJSON struct {
	OCIVersion  string            `json:"ociVersion"`
	ID          string            `json:"id"`
	Pid         int               `json:"pid"`
	Status      string            `json:"status"`
	Bundle      string            `json:"bundle"`
	Rootfs      string            `json:"rootfs"`
	Created     time.Time         `json:"created"`
	Owner       string            `json:"owner"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// status asks rec's supervisor; a supervisor that is gone is stopped.
func (g *globals) status(rec *record) stateJSON {
	st := stateJSON{OCIVersion: specs.Version, ID: rec.ID, Pid: rec.Pid, Status: statusStopped, Bundle: rec.Bundle,
		Rootfs: rec.Rootfs, Created: rec.Created, Owner: rec.Owner, Annotations: rec.Annotations}
	if rec.alive() {
		if r, err := call(g.root, rec.ID, request{Op: "state"}, 5*time.Second); err == nil {
			st.Status = r.Status
		} else {
			st.Status = statusRunning // alive, but busy or stopping
		}
	}
	if st.Status == statusStopped {
		st.Pid = 0
	}
	return st
}

func (g *globals) state(args []string) error {
	id, err := oneID("state", args)
	if err != nil {
		return err
	}
	rec, err := readRecord(g.root, id)
	if err != nil {
		return err
	}
	out, _ := json.MarshalIndent(g.status(rec), "", "  ")
	_, err = fmt.Fprintf(g.stdout, "%s\n", out)
	return err
}

// parseSignal reads a signal as a number or a name (TERM, SIGTERM).
func parseSignal(s string) (syscall.Signal, error) {
	if n, err := strconv.Atoi(s); err == nil {
		if n <= 0 || n > 64 {
			return 0, fmt.Errorf("invalid signal %s", s)
		}
		return syscall.Signal(n), nil
	}
	name := strings.ToUpper(s)
	if !strings.HasPrefix(name, "SIG") {
		name = "SIG" + name
	}
	if sig := unix.SignalNum(name); sig != 0 {
		return sig, nil
	}
	return 0, fmt.Errorf("unknown signal %q", s)
}

func (g *globals) kill(args []string) error {
	var all bool
	fl, err := commandFlags("kill", g, args, func(fl *flag.FlagSet) {
		fl.BoolVar(&all, "all", false, "")
		fl.BoolVar(&all, "a", false, "")
	})
	if err != nil {
		return err
	}
	rest := fl.Args()
	if len(rest) == 1 {
		rest = append(rest, "SIGTERM")
	}
	if len(rest) != 2 {
		return errors.New("kill: want ID [SIGNAL]")
	}
	id := rest[0]
	sig, err := parseSignal(rest[1])
	if err != nil {
		return err
	}
	rec, err := readRecord(g.root, id)
	if err != nil {
		return err
	}
	if !rec.alive() {
		return errors.New("container not running")
	}
	_, err = call(g.root, id, request{Op: "kill", Signal: int(sig), All: all}, deadline)
	return err
}

func (g *globals) delete(args []string) error {
	var force bool
	fl, err := commandFlags("delete", g, args, func(fl *flag.FlagSet) {
		fl.BoolVar(&force, "force", false, "")
		fl.BoolVar(&force, "f", false, "")
	})
	if err != nil {
		return err
	}
	id, err := oneID("delete", fl.Args())
	if err != nil {
		return err
	}
	rec, err := readRecord(g.root, id)
	if errors.Is(err, ErrNotExist) {
		if force {
			// A container already gone (its directory too, or never
			// fully made): nothing to do.
			if root, rerr := filepath.Abs(g.root); rerr == nil {
				_ = os.RemoveAll(containerDir(root, id))
			}
			return nil
		}
		return err
	}
	if err != nil {
		return err
	}
	if rec.alive() {
		st := g.status(rec).Status
		if st != statusCreated && st != statusStopped && !force {
			return fmt.Errorf("cannot delete container %s that is not stopped: %s", id, st)
		}
		_, _ = call(g.root, id, request{Op: "kill", Signal: int(syscall.SIGKILL), All: true}, deadline)
		for end := time.Now().Add(deadline); rec.alive(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(end) {
				return fmt.Errorf("container %s: its supervisor (pid %d) did not end", id, rec.Pid)
			}
		}
	}
	// The supervisor is gone: the cgroups made for linux.cgroupsPath are
	// empty now (tent removed the sandbox's own).
	cgErr := removeCgroups(rec.CgroupsPath)
	return errors.Join(cgErr, os.RemoveAll(containerDir(filepath.Clean(rootOf(g)), id)))
}

// rootOf is the absolute --root.
func rootOf(g *globals) string {
	abs, err := filepath.Abs(g.root)
	if err != nil {
		return g.root
	}
	return abs
}

func (g *globals) exec(ctx context.Context, args []string) (int, error) {
	var procFile, pidFile, console, cwd string
	var detach, tty bool
	var env stringList
	fl, err := commandFlags("exec", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&procFile, "process", "", "")
		fl.StringVar(&procFile, "p", "", "")
		fl.StringVar(&pidFile, "pid-file", "", "")
		fl.StringVar(&console, "console-socket", "", "")
		fl.StringVar(&cwd, "cwd", "", "")
		fl.Var(&env, "env", "")
		fl.Var(&env, "e", "")
		fl.BoolVar(&detach, "detach", false, "")
		fl.BoolVar(&detach, "d", false, "")
		fl.BoolVar(&tty, "tty", false, "")
		fl.BoolVar(&tty, "t", false, "")
	})
	if err != nil {
		return 1, err
	}
	rest := fl.Args()
	if len(rest) < 1 {
		return 1, errors.New("exec: want a container id")
	}
	id := rest[0]
	rec, err := readRecord(g.root, id)
	if err != nil {
		return 1, err
	}
	if !rec.alive() {
		return 1, errors.New("exec: container not running")
	}
	var sp specs.Process
	switch {
	case procFile != "":
		data, err := readSmall(procFile, maxConfig)
		if err != nil {
			return 1, fmt.Errorf("exec: --process: %w", err)
		}
		if err := json.Unmarshal(data, &sp); err != nil {
			return 1, fmt.Errorf("exec: --process %s: %w", procFile, err)
		}
	case len(rest) > 1:
		// runc exec ID CMD...: the container's process, another command.
		b, err := loadBundle(rec.Bundle)
		if err != nil {
			return 1, err
		}
		sp = *b.Config.Process
		sp.Args, sp.Terminal = rest[1:], tty
	default:
		return 1, errors.New("exec: want --process FILE or a command")
	}
	if cwd != "" {
		sp.Cwd = cwd
	}
	sp.Env = append(sp.Env, env...)
	p, err := convertProcess(&sp, "process")
	if err != nil {
		return 1, err
	}
	if p.Terminal && console == "" && detach {
		return 1, errors.New("exec: a terminal with --detach needs --console-socket")
	}
	l := execLaunch{Root: rootOf(g), ID: id, Process: *p}
	if !detach {
		var t *os.File
		if p.Terminal {
			if !isTerminal(os.Stdin) {
				return 1, errors.New("exec: --tty needs a terminal on stdin, or --console-socket")
			}
			t = os.Stdin
		}
		return runExec(l, nil, t), nil
	}

	readyR, readyW, err := os.Pipe()
	if err != nil {
		return 1, err
	}
	defer readyR.Close()
	arg, _ := json.Marshal(l)
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{execArg0, string(arg)},
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{readyW},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	var master, slave *os.File
	if p.Terminal {
		if master, slave, err = openPTY(); err != nil {
			readyW.Close()
			return 1, err
		}
		defer master.Close()
		defer slave.Close()
		cmd.ExtraFiles = append(cmd.ExtraFiles, slave)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, 4
	}
	err = cmd.Start()
	readyW.Close()
	if err != nil {
		return 1, fmt.Errorf("exec: %w", err)
	}
	msg, _ := pipeMessage(ctx, readyR)
	if msg != "ok" {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if msg == "" {
			msg = "exec: the helper ended without a report"
		}
		return 1, errors.New(msg)
	}
	err = writePidFile(pidFile, cmd.Process.Pid)
	if err == nil && master != nil {
		err = sendConsole(console, master)
	}
	if err != nil {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		return 1, err
	}
	_ = cmd.Process.Release()
	return 0, nil
}

func isTerminal(f *os.File) bool {
	_, err := unix.IoctlGetTermios(int(f.Fd()), unix.TCGETS)
	return err == nil
}

type stringList []string

func (s *stringList) String() string     { return strings.Join(*s, ",") }
func (s *stringList) Set(v string) error { *s = append(*s, v); return nil }

func (g *globals) ps(args []string) error {
	var format string
	fl, err := commandFlags("ps", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&format, "format", "table", "")
		fl.StringVar(&format, "f", "table", "")
	})
	if err != nil {
		return err
	}
	id, err := oneID("ps", fl.Args())
	if err != nil {
		return err
	}
	rec, err := readRecord(g.root, id)
	if err != nil {
		return err
	}
	pids := []int{}
	if rec.alive() {
		r, err := call(g.root, id, request{Op: "ps"}, deadline)
		if err != nil {
			return err
		}
		pids = append(pids, r.Pids...)
	}
	switch format {
	case "json":
		return json.NewEncoder(g.stdout).Encode(pids)
	case "table":
		w := bufio.NewWriter(g.stdout)
		fmt.Fprintln(w, "PID")
		for _, p := range pids {
			fmt.Fprintln(w, p)
		}
		return w.Flush()
	}
	return fmt.Errorf("ps: --format %q: want table or json", format)
}

func (g *globals) update(args []string) error {
	var resources string
	fl, err := commandFlags("update", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&resources, "resources", "", "")
		fl.StringVar(&resources, "r", "", "")
	})
	if err != nil {
		return fmt.Errorf("update: only --resources is read: %w", err)
	}
	id, err := oneID("update", fl.Args())
	if err != nil {
		return err
	}
	if _, err := readRecord(g.root, id); err != nil {
		return err
	}
	// Read what was sent (the shim writes it to stdin), so that a
	// malformed request is named as such, then refuse.
	var in io.Reader = g.stdin
	if resources != "" && resources != "-" {
		f, err := os.Open(resources)
		if err != nil {
			return fmt.Errorf("update: --resources: %w", err)
		}
		defer f.Close()
		in = f
	}
	var r specs.LinuxResources
	if in != nil {
		if err := json.NewDecoder(io.LimitReader(in, maxConfig)).Decode(&r); err != nil && !errors.Is(err, io.EOF) {
			return fmt.Errorf("update: --resources: %w", err)
		}
	}
	return fmt.Errorf("update: %w: a container's limits are fixed when it is created", ErrUnsupportedCommand)
}

func (g *globals) list(args []string) error {
	var format string
	var quiet bool
	if _, err := commandFlags("list", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&format, "format", "table", "")
		fl.StringVar(&format, "f", "table", "")
		fl.BoolVar(&quiet, "quiet", false, "")
		fl.BoolVar(&quiet, "q", false, "")
	}); err != nil {
		return err
	}
	root := rootOf(g)
	entries, err := os.ReadDir(root)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	states := []stateJSON{}
	for _, e := range entries {
		rec, err := readRecord(root, e.Name())
		if err != nil {
			continue
		}
		states = append(states, g.status(rec))
	}
	switch {
	case quiet:
		for _, s := range states {
			fmt.Fprintln(g.stdout, s.ID)
		}
		return nil
	case format == "json":
		return json.NewEncoder(g.stdout).Encode(states)
	case format == "table":
		w := tabwriter.NewWriter(g.stdout, 12, 1, 3, ' ', 0)
		fmt.Fprintln(w, "ID\tPID\tSTATUS\tBUNDLE\tCREATED\tOWNER")
		for _, s := range states {
			fmt.Fprintf(w, "%s\t%d\t%s\t%s\t%s\t%s\n", s.ID, s.Pid, s.Status, s.Bundle, s.Created.Format(time.RFC3339Nano), s.Owner)
		}
		return w.Flush()
	}
	return fmt.Errorf("list: --format %q: want table or json", format)
}

// startIn starts cmd in the network namespace at netns ("" for ours):
// from a locked thread that joined it, which Go's fork runs on, so that
// the child and all its threads are in it, after setting sysctls
// (net.*) there (/proc/sys/net is the opening thread's namespace's). The
// thread is never given back to the runtime (it ends with its
// goroutine).
func startIn(cmd *exec.Cmd, netns string, sysctls map[string]string) error {
	if netns == "" {
		return cmd.Start()
	}
	// Followed: CRI names a pod's namespace as /proc/PID/ns/net of the
	// pod's first container (a magic link), and the bundle is the
	// runtime caller's. What it names must be a network namespace.
	f, err := os.Open(netns)
	if err != nil {
		return fmt.Errorf("linux.namespaces: network path: %w", err)
	}
	defer f.Close()
	if t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE); err != nil || t != unix.CLONE_NEWNET {
		return fmt.Errorf("linux.namespaces: network path %s is not a network namespace (%v)", netns, err)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		if err := unix.Setns(int(f.Fd()), unix.CLONE_NEWNET); err != nil {
			done <- fmt.Errorf("joining the network namespace %s: %w", netns, os.NewSyscallError("setns", err))
			return
		}
		for k, v := range sysctls {
			p := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(p, []byte(v), 0); err != nil {
				done <- fmt.Errorf("linux.sysctl %s: %w", k, err)
				return
			}
		}
		done <- cmd.Start()
	}()
	return <-done
}
