package mcp

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/tent-sandbox/tent/internal/handle"
	"github.com/tent-sandbox/tent/sandbox"
)

// Background commands are the sandbox's processes ([sandbox.Handle.Start]):
// the sandbox (its supervisor, for tent mcp) owns them, their pid is
// their pid inside, and their output is kept in the sandbox's bounded
// ring, so they outlive the session, the HTTP request and the client
// that started them, and any session finds them by id or pid. This
// package keeps no table of them, and no input: process_write is the
// Process's WriteStdin, which the sandbox queues (bounded) without
// waiting for the command.
//
// A command's id is "SANDBOX:PID" (its sandbox's id and its pid inside):
// it names the command without a sandbox argument, from any session.

// mergeStderr starts every process_start script: its stderr goes where
// its stdout goes, so that one stream (one offset) holds both in the
// order written, as the tools promise. It is cut from the command shown;
// on the script's first line, it keeps the line numbers of its errors.
const mergeStderr = "exec 2>&1; "

// readChunk is what one ReadOutput returns at most (the sandbox's bound):
// a shorter piece is all there is for now.
const readChunk = 64 << 10

// proc is a background command found by its id.
type proc struct {
	bx  *box
	pid int
	h   sandbox.Handle
	p   sandbox.Process
}

// procID is the id of pid in bx.
func procID(bx *box, pid int) string { return bx.id + ":" + strconv.Itoa(pid) }

func (p *proc) id() string { return procID(p.bx, p.pid) }

// lookupProcess finds a background command by its id ("SANDBOX:PID"), or
// by its pid in ref's sandbox ("" is the default one).
func (s *Server) lookupProcess(ctx context.Context, id, ref string) (*proc, error) {
	unknown := fmt.Errorf("no background command %q: process_list shows them (ended ones are kept an hour, the last 64 per sandbox)", id)
	boxRef, pidText, ok := strings.Cut(id, ":")
	if !ok {
		boxRef, pidText = ref, id
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 {
		return nil, unknown
	}
	bx, err := s.resolve(ctx, boxRef)
	if err != nil {
		return nil, err
	}
	if ok && ref != "" {
		if other, err := s.resolve(ctx, ref); err != nil || other != bx {
			return nil, fmt.Errorf("the id %q names a command of sandbox %s, not of %q: leave sandbox out", id, bx.id, ref)
		}
	}
	h := handle.Open(ctx, s.b, bx.id)
	p, err := h.Process(ctx, pid)
	if errors.Is(err, sandbox.ErrNoProcess) {
		return nil, unknown
	}
	if err != nil {
		return nil, err
	}
	return &proc{bx: bx, pid: pid, h: h, p: p}, nil
}

// info describes the command now.
func (p *proc) info(ctx context.Context) (sandbox.ProcessInfo, error) {
	infos, err := p.h.Processes(ctx)
	if err != nil {
		return sandbox.ProcessInfo{}, err
	}
	for _, pi := range infos {
		if pi.Pid == p.pid {
			return pi, nil
		}
	}
	return sandbox.ProcessInfo{}, fmt.Errorf("background command %s: its record is gone (process_list shows the ones kept)", p.id())
}

// startProcess starts a background command in bx: at most MaxProcesses
// run at once in this server's sandboxes.
func (s *Server) startProcess(ctx context.Context, bx *box, o runOpts, command string) (*proc, sandbox.ProcessInfo, error) {
	req, _, err := o.request([]string{"sh", "-c", mergeStderr + command})
	if err != nil {
		return nil, sandbox.ProcessInfo{}, err
	}
	req.Stdin = nil // written below: a process's stdin is written, not given
	if o.TimeoutSeconds == 0 {
		req.Timeout = 0 // a background command runs until killed, or its sandbox's own limit
	}
	s.starting.Lock()
	defer s.starting.Unlock()
	running := 0
	s.eachProcess(ctx, func(_ *box, pi sandbox.ProcessInfo) {
		if pi.Running && !pi.Exec { // an exec tool call's command is no background one
			running++
		}
	})
	if running >= MaxProcesses {
		return nil, sandbox.ProcessInfo{}, fmt.Errorf("%d background commands are running, the most this server allows: process_kill one, or wait for one to end (process_list)", running)
	}
	h := handle.Open(ctx, s.b, bx.id)
	sp, err := h.Start(ctx, req, sandbox.StartOptions{Stdin: true})
	if err != nil {
		return nil, sandbox.ProcessInfo{}, err
	}
	p := &proc{bx: bx, pid: sp.Pid(), h: h, p: sp}
	if o.Stdin != "" {
		if err := sp.WriteStdin(ctx, []byte(o.Stdin)); err != nil {
			_ = p.kill(ctx) // no one would know of it
			return nil, sandbox.ProcessInfo{}, err
		}
	}
	info, err := p.info(ctx)
	if err != nil { // it ran and its record went already: a rare race, not a failure
		info = sandbox.ProcessInfo{Pid: p.pid, Args: req.Args, Running: true}
	}
	return p, info, nil
}

// eachProcess calls f for each process of the server's sandboxes.
func (s *Server) eachProcess(ctx context.Context, f func(*box, sandbox.ProcessInfo)) {
	s.mu.Lock()
	boxes := slices.Clone(s.boxes)
	s.mu.Unlock()
	for _, bx := range boxes {
		infos, _ := handle.Open(ctx, s.b, bx.id).Processes(ctx) // one gone meanwhile has none
		for _, pi := range infos {
			f(bx, pi)
		}
	}
}

// readOutput reads up to limit bytes of stream fd from off, waiting until
// there is some or ctx ends (then what was read, with ctx's error when
// nothing was).
func readOutput(ctx context.Context, p sandbox.Process, fd int, off int64, limit int) (sandbox.Output, error) {
	out, err := p.ReadOutput(ctx, fd, off)
	if err != nil {
		return sandbox.Output{Offset: off}, err
	}
	for last := len(out.Data); last >= readChunk && len(out.Data) < limit && !out.End; {
		more, err := p.ReadOutput(ctx, fd, out.Offset+int64(len(out.Data)))
		if err != nil || more.Dropped > 0 {
			break // ctx's end, or the ring moved on: the next read says
		}
		out.Data, out.End, last = append(out.Data, more.Data...), more.End, len(more.Data)
	}
	if len(out.Data) > limit {
		out.Data, out.End = out.Data[:limit], false
	}
	return out, nil
}

// kill kills the command's process group and waits for its end (ctx's
// at most).
func (p *proc) kill(ctx context.Context) error {
	if err := p.p.Signal(ctx, syscall.SIGKILL); err != nil && !errors.Is(err, sandbox.ErrNoProcess) {
		return err
	}
	_, err := p.p.Wait(ctx)
	if errors.Is(err, sandbox.ErrTerminated) {
		return nil // it ended with its sandbox: killed all the same
	}
	return err
}

// noteDenialsOnce adds an ended command's network denials (res's) to
// its sandbox's record, once per command.
func (s *Server) noteDenialsOnce(p *proc, res *sandbox.ExecResult) {
	s.mu.Lock()
	seen := slices.Contains(p.bx.ended, p.pid)
	if !seen {
		p.bx.ended = append(p.bx.ended, p.pid)
		if over := len(p.bx.ended) - maxProcessRecords; over > 0 {
			p.bx.ended = slices.Delete(p.bx.ended, 0, over)
		}
	}
	s.mu.Unlock()
	if !seen {
		s.noteDenials(p.bx, res.NetworkDenied)
	}
}

// commandOf is how a process's command line is shown: a process_start
// script as it was given, another command's argv joined.
func commandOf(args []string) string {
	if len(args) == 3 && args[0] == "sh" && args[1] == "-c" && strings.HasPrefix(args[2], mergeStderr) {
		return strings.TrimPrefix(args[2], mergeStderr)
	}
	return strings.Join(args, " ")
}
