package oci

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"syscall"
	"time"
)

// The mode oci starts (the exec helper; the container's supervisor is
// package supervised's) gets what it runs — an exec's process with its
// arguments and environment — as its launch, JSON on an inherited pipe,
// never on its command line or in its environment: every local user can
// read a process's /proc/PID/cmdline. Its command line is its mode and
// the container's id (no secret: it is on tent-runc's own).
const (
	fdReady  = 3 // the ready pipe: "ok" or the error, to its end
	fdLaunch = 4 // the launch (JSON), read to its end
	fdTTY    = 5 // with a terminal: its slave, the child's controlling terminal
)

// maxLaunch bounds a launch: an exec's process (--process is at most
// maxConfig bytes; JSON writes a byte as at most 6) and its --env.
const maxLaunch = 8 * maxConfig

// child is a mode to start: argv[0], the container's id (argv[1]), its
// launch, and whether it gets a new pseudo-terminal.
type child struct {
	arg0, id string
	launch   any
	terminal bool
}

// spawned is a started child and what it reported on its ready pipe.
type spawned struct {
	cmd *exec.Cmd
	// master is the terminal's master (with child.terminal), which the
	// caller sends to the console socket and closes.
	master *os.File
	// report is what the child wrote on its ready pipe before it closed
	// it (or died); readErr why reading it, or writing the launch,
	// failed, if it did.
	report  string
	readErr error
}

// spawn starts c as this process's child, in a session of its own,
// with this process's stdio or, with a terminal, a new pseudo-terminal
// as its controlling terminal (fd 5); writes its launch on fd 4; and
// reads its report on fd 3. An error means no child runs.
func spawn(ctx context.Context, c child) (*spawned, error) {
	launch, err := json.Marshal(c.launch)
	if err != nil {
		return nil, err
	}
	readyR, readyW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	defer readyR.Close()
	launchR, launchW, err := os.Pipe()
	if err != nil {
		readyW.Close()
		return nil, err
	}
	defer launchW.Close()
	// The child's ends, closed here once it holds them.
	ends := []*os.File{readyW, launchR}
	closeEnds := func() {
		for _, f := range ends {
			f.Close()
		}
	}
	cmd := &exec.Cmd{Path: "/proc/self/exe", Args: []string{c.arg0, c.id},
		Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, ExtraFiles: []*os.File{readyW, launchR},
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	s := &spawned{cmd: cmd}
	if c.terminal {
		master, slave, err := openPTY()
		if err != nil {
			closeEnds()
			return nil, err
		}
		s.master = master
		ends = append(ends, slave)
		cmd.ExtraFiles = append(cmd.ExtraFiles, slave)
		cmd.Stdin, cmd.Stdout, cmd.Stderr = nil, nil, nil
		cmd.SysProcAttr.Setctty, cmd.SysProcAttr.Ctty = true, fdTTY
	}
	err = cmd.Start()
	closeEnds()
	if err != nil {
		if s.master != nil {
			s.master.Close()
		}
		return nil, err
	}
	werr := writeLaunch(launchW, launch)
	s.report, s.readErr = pipeMessage(ctx, readyR)
	if s.readErr == nil {
		s.readErr = werr
	}
	return s, nil
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

// writeLaunch writes data on the launch pipe w and closes it: the child
// reads it to its end. A child that ends first fails the write (EPIPE).
func writeLaunch(w *os.File, data []byte) error {
	defer w.Close()
	_ = w.SetWriteDeadline(time.Now().Add(deadline))
	if _, err := w.Write(data); err != nil {
		return fmt.Errorf("sending the launch: %w", err)
	}
	return nil
}

// abort ends the child and reaps it; its terminal's master, if any,
// is closed.
func (s *spawned) abort() {
	_ = s.cmd.Process.Kill()
	_ = s.cmd.Wait()
	s.closeMaster()
}

// release leaves the child to this process's parent (the shim, a
// subreaper) once this process exits; the terminal's master, if any, is
// closed.
func (s *spawned) release() {
	_ = s.cmd.Process.Release()
	s.closeMaster()
}

func (s *spawned) closeMaster() {
	if s.master != nil {
		s.master.Close()
	}
}

// failure is the error the child reported, or what, when it reported
// nothing, with why if known.
func (s *spawned) failure(what string) error {
	switch {
	case s.report != "":
		return errors.New(s.report)
	case s.readErr != nil:
		return fmt.Errorf("%s: %w", what, s.readErr)
	}
	return errors.New(what)
}

// launched is the start of a mode that spawn started: it reads its
// launch (fd 4, to its end, closed) into v and returns its ready pipe
// (fd 3). A launch that cannot be read is reported on the ready pipe,
// as what's failure, and ends the mode (nil).
func launched(what string, v any) *os.File {
	ready := os.NewFile(fdReady, "ready")
	if err := readLaunch(v); err != nil {
		fmt.Fprintf(ready, "tent-runc: %s: reading the launch from fd %d: %v", what, fdLaunch, err)
		ready.Close()
		return nil
	}
	return ready
}

// readLaunch reads fd 4 to its end (at most maxLaunch bytes), closes it
// and decodes it into v.
func readLaunch(v any) error {
	f := os.NewFile(fdLaunch, "launch")
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, maxLaunch+1))
	switch {
	case err != nil:
		return err
	case len(data) > maxLaunch:
		return fmt.Errorf("the launch is over %d bytes", maxLaunch)
	}
	return json.Unmarshal(data, v)
}
