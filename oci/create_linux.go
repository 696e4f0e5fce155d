package oci

import (
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
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/atomicfile"
)

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
