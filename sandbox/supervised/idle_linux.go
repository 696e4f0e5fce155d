package supervised

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/internal/ctlmsg"
	"github.com/tent-sandbox/tent/namespaces"
	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/internal/handoff"
)

// An idle supervisor (no request, no command running, no proxied
// connection open for IdleAfter) gives way to its idle holder
// (namespaces.ExecSupervisorHolder): a few hundred KiB instead of a Go
// process. The holder watches the supervisor's socket, the init's control
// socket and the proxy's listeners, and execs the supervisor again —
// argv[0] modeResume, with the state descriptor and the waking signal
// appended — as soon as one of them is readable, or when a signal or the
// sandbox's deadline comes. The state (everything the *sandbox.Sandbox
// held) passes in a memfd; package sandbox captures and adopts it (see
// package handoff).

// handOff replaces this process with the idle holder; it returns only
// when that failed.
func handOff(st stateDir, rec *record, sb *sandbox.Sandbox, l *net.UnixListener, o launch) error {
	fd, err := ctlmsg.Dup(l) // the holder gets its own
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return handoff.HandOff(sb, st.Dir, rec.ID, fd, o.resumeArgs(st, rec.ID))
}

// resume continues, in the process the idle holder exec'd, the
// supervision it handed off: stateFD and reason are the two arguments the
// holder added. A reason that names a signal (not "0") ends the
// supervision as the signal would have.
func resume(ctx context.Context, o launch, stateFD, reason string) error {
	popts, closeLog, err := o.provisionOptions(os.Stderr)
	if err != nil {
		return err
	}
	defer closeLog()
	o.log = popts.Logger
	v, r, err := handoff.Adopt(stateFD, popts)
	st := stateDir{Dir: r.Store}
	if err != nil {
		if r.ID != "" {
			_ = st.removeFiles(r.ID)
		}
		return err
	}
	sb := v.(*sandbox.Sandbox)
	fail := func(err error) error {
		_ = sb.Terminate(context.Background())
		_ = st.removeFiles(r.ID)
		return fmt.Errorf("resuming the supervisor of %s: %w", r.ID, err)
	}
	f := os.NewFile(uintptr(r.Listener), "tent-supervisor")
	ln, err := net.FileListener(f)
	f.Close()
	if err != nil {
		return fail(err)
	}
	l, ok := ln.(*net.UnixListener)
	if !ok {
		ln.Close()
		return fail(fmt.Errorf("descriptor %d is not a unix socket", r.Listener))
	}
	rec, err := st.load(r.ID)
	if re := (*RecordError)(nil); errors.As(err, &re) && re.ID == r.ID {
		// Its record was damaged while it idled: this process knows the
		// sandbox, and writes it again rather than ending it. (Should
		// that fail, it serves on: tent rm reaches it through its socket.)
		rec, err = rebuiltRecord(r.ID, sb), nil
		rec.Socket = st.SocketPath(r.ID)
		if serr := st.Save(rec); serr != nil {
			popts.Logger.Warn("the sandbox's record could not be written again", "id", r.ID, "err", serr)
		} else {
			popts.Logger.Warn("the sandbox's record was broken: written again from the supervisor's state", "id", r.ID, "was", re.Err)
		}
	}
	if err != nil {
		l.Close()
		return fail(err)
	}
	if reason != "0" {
		c, cancel := context.WithCancel(ctx)
		cancel()
		ctx = c
	}
	return serve(ctx, st, rec, sb, l, o)
}

// rebuiltRecord is the record of sandbox id as its supervisor (this
// process) knows it, for one whose record cannot be read: its name,
// labels, spec, protections, layers and cgroups from sb; Created is when
// the supervisor started (its start time since boot), the best known.
func rebuiltRecord(id string, sb *sandbox.Sandbox) *record {
	info := sb.Info()
	state := sandbox.StateRunning
	if info.State == sandbox.StateSuspended {
		state = sandbox.StateSuspended
	}
	pid := os.Getpid()
	start := namespaces.StartTicks(pid)
	created := time.Now().UTC()
	if booted := bootTime(); !booted.IsZero() && start > 0 {
		// Clock ticks are USER_HZ, 100 on every Linux architecture.
		created = booted.Add(time.Duration(start) * (time.Second / 100)).UTC()
	}
	return &record{
		recordHead: recordHead{ID: id, State: state, Supervisor: pid, SupervisorStart: start},
		Name:       info.Spec.Name, Labels: info.Spec.Labels, Created: created,
		Spec: info.Spec, Protections: info.Protections, Layers: info.Layers, Cgroups: info.CgroupPaths,
	}
}
