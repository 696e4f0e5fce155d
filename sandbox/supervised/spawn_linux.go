package supervised

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
)

// spawn starts a supervisor for o and waits until its sandbox is ready. A
// name (not "") must be free in the state directory, but for the sandbox
// id itself (Resume brings a stopped sandbox back under its id and name):
// the names lock is held from that check until the new record is saved.
func (b *Backend) spawn(ctx context.Context, o launch) (sandbox.Info, error) {
	return b.spawnWith(ctx, o, nil)
}

// spawnWith is spawn, of a child supervisor when c is not nil (see
// child_linux.go; c.cmd is then set).
func (b *Backend) spawnWith(ctx context.Context, o launch, c *childIO) (sandbox.Info, error) {
	if err := ctx.Err(); err != nil {
		return sandbox.Info{}, err
	}
	if name := o.Spec.Name; name != "" {
		if err := validName(name); err != nil {
			return sandbox.Info{}, err
		}
	}
	if err := b.st.ensure(); err != nil {
		return sandbox.Info{}, fmt.Errorf("state directory: %w", err)
	}
	if name := o.Spec.Name; name != "" {
		unlock, err := b.st.LockNames()
		if err != nil {
			return sandbox.Info{}, fmt.Errorf("state directory: %w", err)
		}
		defer unlock()
		other, err := b.st.NameInUse(name)
		if err != nil {
			return sandbox.Info{}, err
		}
		if other != nil && other.ID != o.ID {
			return sandbox.Info{}, &nameError{fmt.Sprintf("the name %q is already used by sandbox %s (%s): choose another name, or tent rm %s", name, other.ID, other.State, other.ID)}
		}
	}
	// What creates killed before their sandbox was saved left goes (see
	// stateDir.sweep): cheap, a directory read.
	if err := b.st.sweep(); err != nil {
		b.log.Debug("sweeping the state directory", "err", err)
	}
	o.Store, o.IdleAfter, o.NetLog = b.st.Dir, b.opts.IdleAfter, b.opts.NetLog
	o.Debug = b.log.Enabled(ctx, slog.LevelDebug)
	if err := b.start(ctx, o, c); err != nil {
		return sandbox.Info{}, err
	}
	rec, err := b.st.load(o.ID)
	if err != nil {
		if c != nil { // nobody will know of it: it ends, and is reaped
			_ = c.cmd.Process.Signal(syscall.SIGTERM)
			_ = c.cmd.Wait()
		}
		return sandbox.Info{}, err
	}
	if c != nil {
		c.cgroupsPath = rec.CgroupParents
	}
	return b.info(rec), nil
}

// start runs the supervisor of o and reads its ready line; a child
// supervisor (c not nil) is left to the caller, in c.cmd.
func (b *Backend) start(ctx context.Context, o launch, c *childIO) error {
	r, w, err := os.Pipe()
	if err != nil {
		return err
	}
	defer r.Close()
	// The log, locked: what tells a sweep that this sandbox is being
	// created, and, once the supervisor holds it, that it lives.
	logFile, err := openLog(b.st, o.ID)
	if err != nil {
		w.Close()
		return err
	}
	defer logFile.Close()
	// The launch goes through a pipe (fd 4), never the command line:
	// env values are secrets, and every user can read a process's argv.
	lr, lw, err := os.Pipe()
	if err != nil {
		w.Close()
		return err
	}
	defer lr.Close()
	defer lw.Close()
	// The state directory and the id are on the command line (they are
	// no secret) so that ps tells supervisors apart.
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{modeSupervise, b.st.Dir, o.ID}}
	cmd.Stdout, cmd.Stderr, cmd.ExtraFiles = logFile, logFile, []*os.File{w, lr}
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	startCmd := cmd.Start
	if c != nil {
		c.setup(cmd, logFile, o.Main)
		if c.start != nil {
			startCmd = func() error { return c.start(cmd) }
		}
	}
	if err := startCmd(); err != nil {
		w.Close()
		lw.Close()
		return err
	}
	w.Close()
	lr.Close()
	// The launch pipe stays open after the launch: the acknowledgement
	// of "ok" goes back on it (see acknowledge).
	sent := make(chan struct{})
	go func() {
		defer close(sent)
		_ = json.NewEncoder(lw).Encode(o)
	}()
	b.log.Debug("supervisor started", "id", o.ID, "pid", cmd.Process.Pid)
	// Cancelling ctx while the sandbox is provisioned ends the supervisor
	// as SIGTERM does: it tears down what it made and removes its record.
	cancelled := context.AfterFunc(ctx, func() { _ = cmd.Process.Signal(syscall.SIGTERM) })
	br := bufio.NewReader(r)
	line, _ := br.ReadString('\n')
	if !cancelled() && ctx.Err() != nil { // the signal was sent
		_ = cmd.Wait()
		_ = b.st.removeFiles(o.ID)
		return ctx.Err()
	}
	if strings.TrimSpace(line) == "ok" {
		<-sent // the supervisor has read the launch: the encoder is done
		if err := acknowledge(lw); err != nil {
			_ = cmd.Wait()
			return fmt.Errorf("the sandbox's supervisor ended as it was ready: %w (see %s)", err, logFile.Name())
		}
		// The supervisor outlives this call, not this process: a
		// long-lived caller (tent serve) reaps it when it ends, or each
		// sandbox it ever ran would stay behind as a zombie, holding a
		// pid. (A short-lived one, the CLI, leaves it to init.) A child
		// supervisor is the caller's to wait for, or to release.
		if c != nil {
			c.cmd = cmd
			return nil
		}
		go func() { _ = cmd.Wait() }()
		return nil
	}
	// A refusal may run over several lines (what is missing, the fix):
	// read it whole, for as long as the supervisor takes to exit.
	_ = r.SetReadDeadline(time.Now().Add(5 * time.Second))
	rest, _ := io.ReadAll(io.LimitReader(br, 1<<20))
	_ = cmd.Wait()
	f := strings.SplitN(strings.TrimSuffix(line, "\n"), " ", 4)
	if len(f) < 4 || f[0] != "error" {
		// Keep the log: it is all there is to say what happened. (A later
		// sweep removes it, the sandbox having no record: its end is in
		// the error too.)
		return fmt.Errorf("the sandbox's supervisor failed: see %s%s", logFile.Name(), logTail(logFile.Name()))
	}
	_ = os.Remove(logFile.Name()) // a refusal leaves nothing behind
	code, _ := strconv.Atoi(f[1])
	return remoteError(reply{Code: code, Kind: f[2], Error: strings.TrimSpace(f[3] + "\n" + string(rest))})
}

// acknowledge tells the supervisor that its "ok" was read, on the launch
// pipe w, and closes it. A supervisor whose creator ends without
// acknowledging (killed before or while reading "ok") ends its sandbox,
// which nobody else knows the id of: "ok" written into a pipe whose
// reader is dying is not "ok" read. A variable so that tests can be the
// creator that dies just after reading it.
var acknowledge = func(w *os.File) error {
	_, err := w.Write([]byte(ackLine))
	if cerr := w.Close(); err == nil {
		err = cerr
	}
	return err
}

// logTail is the end of a supervisor's log (its last 2 KiB, not following
// a symlink) as a suffix for an error: "" when empty or unreadable.
func logTail(path string) string {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW|syscall.O_NONBLOCK, 0)
	if err != nil {
		return ""
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil || !fi.Mode().IsRegular() || fi.Size() == 0 {
		return ""
	}
	const maxTail = 2048
	off := max(0, fi.Size()-maxTail)
	b := make([]byte, fi.Size()-off)
	n, _ := f.ReadAt(b, off)
	tail := strings.TrimSpace(strings.ToValidUTF8(string(b[:n]), "?"))
	if tail == "" {
		return ""
	}
	return ", which ends:\n" + tail
}
