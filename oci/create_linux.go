package oci

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
)

// pidTemps names the temporaries of pid files.
var pidTemps = atomicfile.Options{Prefix: ".tent-pid-", Suffix: ".tmp"}

// writePidFile writes pid to path atomically (as runc does: a temporary
// file beside it, renamed; here through atomicfile: created exclusively,
// never through a symlink, locked while written, fsync'd, renamed, the
// directory fsync'd), so that a reader (containerd) sees no file or the
// whole pid. A killed writer's temporaries go with the next pid file
// written into that directory.
func writePidFile(path string, pid int) error {
	if path == "" {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return err
	}
	dir, err := os.OpenFile(filepath.Dir(abs), os.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("failed to write the pid file: %w", err)
	}
	defer dir.Close()
	_, _ = pidTemps.Clean(int(dir.Fd()))
	err = atomicfile.WriteFileAt(int(dir.Fd()), filepath.Base(abs), 0o600, pidTemps, func(w io.Writer) error {
		_, err := io.WriteString(w, strconv.Itoa(pid))
		return err
	})
	if err != nil {
		return fmt.Errorf("failed to write the pid file: %w", err)
	}
	return nil
}

// createArgs are create's flags and container id.
type createArgs struct {
	id, bundle, pidFile, console string
}

// create is runc's create: it starts the container's supervisor (a
// child supervisor of package supervised, this process's child), which
// provisions the sandbox and holds the process until start; records the
// container; and leaves the supervisor to the caller's parent (the shim,
// a subreaper).
func (g *globals) create(ctx context.Context, args []string) (err error) {
	a, err := g.createArgs(args)
	if err != nil {
		return err
	}
	root, err := stateRoot(g.root)
	if err != nil {
		return err
	}
	b, err := loadBundle(a.bundle)
	if err != nil {
		return err
	}
	switch {
	case b.Main.Terminal && a.console == "":
		return errors.New("create: process.terminal is set: --console-socket is required to receive the terminal")
	case !b.Main.Terminal && a.console != "":
		return errors.New("create: --console-socket given but process.terminal is not set")
	}
	if err := podSysctls(root, b); err != nil {
		return err
	}
	for _, ig := range b.Ignored {
		g.logger.Debug("bundle setting left to tent", "setting", ig)
	}
	dir := containerDir(root, a.id)
	if err := os.Mkdir(dir, 0o700); err != nil {
		if errors.Is(err, os.ErrExist) {
			return fmt.Errorf("container with id %s already exists", a.id)
		}
		return fmt.Errorf("failed to create the container's state: %w", err)
	}
	defer func() {
		if err != nil {
			_ = os.RemoveAll(dir)
		}
	}()
	child, sb, master, err := launchContainer(ctx, dir, b)
	if err != nil {
		return err
	}
	if master != nil {
		defer master.Close()
	}
	if err := recordContainer(root, a, b, child, master); err != nil {
		// Nobody will know of it: it ends, and this process reaps it.
		_ = sb.Terminate(context.Background())
		_, _ = child.Wait()
		return err
	}
	return child.Release()
}

// launchContainer starts the container's supervisor with its state in
// dir (in the bundle's network namespace, if it names one), with the
// bundle's process held, on a new terminal whose master it returns when
// the process has one.
func launchContainer(ctx context.Context, dir string, b *bundle) (*supervised.Child, *supervised.Sandbox, *os.File, error) {
	be, err := backendAt(dir)
	if err != nil {
		return nil, nil, nil, err
	}
	// The init is the shim's too (as runc's container process): the pid
	// it reaps, enters (nsenter, CNI) and watches (its cgroup's OOM
	// events, its metrics) is in the container.
	cl := supervised.ChildLaunch{Spec: b.Spec, Args: b.Main.Args, Env: b.Main.Env, Dir: b.Main.Cwd, ParentReaps: true,
		ShareIPC: b.IPCNS != "", Sysfs: true, Start: func(cmd *exec.Cmd) error { return startIn(cmd, b) }}
	if b.PIDNS != "" {
		pidNS, err := openNamespace(b.PIDNS, "pid", "a pid namespace", unix.CLONE_NEWPID)
		if err != nil {
			return nil, nil, nil, err
		}
		defer pidNS.Close()
		cl.PIDNamespace = pidNS
	}
	if b.Config.Linux != nil {
		// The supervisor joins it, so that the shim's metrics, read from
		// the cgroup of the pid it reaps, show the container.
		cl.CgroupsPath = b.Config.Linux.CgroupsPath
	}
	var master *os.File
	if b.Main.Terminal {
		m, slave, err := openPTY()
		if err != nil {
			return nil, nil, nil, err
		}
		defer slave.Close()
		master, cl.Terminal = m, slave
	}
	child, err := be.LaunchChild(ctx, cl)
	if err == nil {
		var sb *supervised.Sandbox
		if sb, err = be.Sandbox(ctx, child.Info.ID); err == nil {
			return child, sb, master, nil
		}
		_ = child.Release()
	}
	if master != nil {
		master.Close()
	}
	return nil, nil, nil, err
}

// createArgs parses create's command line.
func (g *globals) createArgs(args []string) (createArgs, error) {
	var a createArgs
	var preserve int
	fl, err := commandFlags("create", g, args, func(fl *flag.FlagSet) {
		fl.StringVar(&a.bundle, "bundle", ".", "")
		fl.StringVar(&a.bundle, "b", ".", "")
		fl.StringVar(&a.pidFile, "pid-file", "", "")
		fl.StringVar(&a.console, "console-socket", "", "")
		fl.Bool("no-pivot", false, "")
		fl.Bool("no-new-keyring", false, "")
		fl.IntVar(&preserve, "preserve-fds", 0, "")
	})
	if err != nil {
		return a, err
	}
	if a.id, err = oneID("create", fl.Args()); err != nil {
		return a, err
	}
	if preserve != 0 {
		return a, fmt.Errorf("create: --preserve-fds: %w (the container gets its stdio only)", ErrUnsupportedCommand)
	}
	return a, nil
}

// recordContainer writes the container's state.json, sends its
// terminal's master to the console socket, and writes the container's
// pid to --pid-file: its sandbox's init (the supervisor's where it has
// none).
func recordContainer(root string, a createArgs, b *bundle, child *supervised.Child, master *os.File) error {
	owner := ""
	if u, uerr := user.LookupId(strconv.Itoa(os.Geteuid())); uerr == nil {
		owner = u.Username
	}
	pid := child.Info.InitPID
	if pid <= 0 {
		pid = child.Pid()
	}
	rec := &record{ID: a.id, Bundle: b.Dir, Rootfs: b.Spec.Root.Path, Pid: pid, Supervisor: child.Pid(), Sandbox: child.Info.ID,
		Created: time.Now().UTC(), Owner: owner, Annotations: b.Config.Annotations, UID: b.Main.UID, GID: b.Main.GID, PodSysctls: b.PodSysctls,
		Cgroups: child.Info.CgroupPaths, InitPID: child.Info.InitPID, CgroupsPath: child.CgroupsPath}
	err := writeRecord(root, rec)
	if err == nil && master != nil {
		err = sendConsole(a.console, master)
	}
	if err == nil {
		err = writePidFile(a.pidFile, pid)
	}
	return err
}

// startIn starts cmd in the bundle's network and IPC namespaces, when it
// names them (else ours): from a locked thread that joined them, which
// Go's fork runs on, so that the child and all its threads are in them,
// after setting the network sysctls (net.*) and checking the IPC ones
// there (/proc/sys is the opening thread's namespaces'). The thread is
// never given back to the runtime (it ends with its goroutine).
func startIn(cmd *exec.Cmd, b *bundle) error {
	if b.NetNS == "" && b.IPCNS == "" {
		return cmd.Start()
	}
	var joins []*os.File
	defer func() {
		for _, f := range joins {
			f.Close()
		}
	}()
	for _, j := range []struct {
		path, what, kind string
		typ              int
	}{{b.NetNS, "network", "a network namespace", unix.CLONE_NEWNET}, {b.IPCNS, "ipc", "an IPC namespace", unix.CLONE_NEWIPC}} {
		if j.path == "" {
			continue
		}
		f, err := openNamespace(j.path, j.what, j.kind, j.typ)
		if err != nil {
			return err
		}
		joins = append(joins, f)
	}
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread() // never unlocked: the thread dies with the goroutine
		for _, f := range joins {
			if err := unix.Setns(int(f.Fd()), 0); err != nil {
				done <- fmt.Errorf("joining the namespace %s: %w", f.Name(), os.NewSyscallError("setns", err))
				return
			}
		}
		for _, k := range slices.Sorted(maps.Keys(b.Sysctls)) {
			p := "/proc/sys/" + strings.ReplaceAll(k, ".", "/")
			if err := os.WriteFile(p, []byte(b.Sysctls[k]), 0); err != nil {
				done <- fmt.Errorf("linux.sysctl %s: %w", k, err)
				return
			}
		}
		for _, k := range slices.Sorted(maps.Keys(b.IPCSysctls)) {
			got, err := readSmall("/proc/sys/"+strings.ReplaceAll(k, ".", "/"), 4096)
			if err != nil {
				done <- fmt.Errorf("linux.sysctl %s: %w", k, err)
				return
			}
			if strings.Join(strings.Fields(string(got)), " ") != strings.Join(strings.Fields(b.IPCSysctls[k]), " ") {
				done <- fmt.Errorf("%w: linux.sysctl %s: %q, but the pod's IPC namespace, which the container joins, has %q: a pod's IPC sysctls are its sandbox's", ErrUnsupportedConfig, k, b.IPCSysctls[k], strings.TrimSpace(string(got)))
				return
			}
		}
		done <- cmd.Start()
	}()
	return <-done
}

// openNamespace opens a bundle's namespace path (what: its type's name in
// linux.namespaces; kind: in a sentence) and checks that it is a namespace
// of type typ; an IPC or pid namespace must also be a container's (see
// sandbox.OwnedByCaller). The path is followed: CRI names a pod's namespaces as
// /proc/PID/ns/* of the pod's sandbox container's pid (a magic link), and
// the bundle is the runtime caller's.
func openNamespace(path, what, kind string, typ int) (*os.File, error) {
	// Non-blocking: a FIFO at the path opens at once (and is then no
	// namespace) rather than hang create until a writer comes.
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOCTTY, 0)
	if err != nil {
		return nil, fmt.Errorf("linux.namespaces: %s path: %w", what, &os.PathError{Op: "open", Path: path, Err: err})
	}
	f := os.NewFile(uintptr(fd), path)
	if t, err := unix.IoctlRetInt(int(f.Fd()), unix.NS_GET_NSTYPE); err != nil || t != typ {
		f.Close()
		return nil, fmt.Errorf("linux.namespaces: %s path %s is not %s (%v)", what, path, kind, err)
	}
	if typ == unix.CLONE_NEWIPC || typ == unix.CLONE_NEWPID {
		if host, err := sandbox.OwnedByCaller(f); err != nil || host {
			f.Close()
			return nil, fmt.Errorf("%w: linux.namespaces: %s path %s: %s of the host's user namespace (the host's own, or one no container made) is never joined (%v)", ErrUnsupportedConfig, what, path, kind, err)
		}
	}
	return f, nil
}

// podSysctls gives a pod's container the pod's IPC sysctls, from its
// sandbox container's record (CRI's annotation names it; see
// bundle.PodSysctls); the container's own win. A sandbox that is gone
// gives none.
func podSysctls(root string, b *bundle) error {
	if podSandbox(b.Config.Annotations) || b.IPCNS != "" {
		return nil // the pod's own, or the pod's IPC namespace joined
	}
	sid := b.Config.Annotations["io.kubernetes.cri.sandbox-id"]
	if sid == "" {
		sid = b.Config.Annotations["io.kubernetes.cri-o.SandboxID"]
	}
	if sid == "" || validID(sid) != nil {
		return nil
	}
	rec, err := readRecord(root, sid)
	if err != nil || len(rec.PodSysctls) == 0 {
		return nil
	}
	for k, v := range rec.PodSysctls {
		if _, own := b.Spec.Sysctls[k]; own {
			continue
		}
		if b.Spec.Sysctls == nil {
			b.Spec.Sysctls = map[string]string{}
		}
		b.Spec.Sysctls[k] = v
	}
	if err := sandbox.ValidateSysctls(b.Spec.Sysctls, b.Spec.Network); err != nil {
		return fmt.Errorf("%w: the pod's sysctls: %v", ErrUnsupportedConfig, err)
	}
	return nil
}
