package envd

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/tent-sandbox/tent/sandbox"
	"github.com/tent-sandbox/tent/sandbox/supervised"
	"github.com/tent-sandbox/tent/serve/envd/processpb"
)

// outKind is which stream a piece of output came from.
type outKind uint8

const (
	kindStdout outKind = iota
	kindStderr
	kindPTY
)

// chunk is one write of the process, as it wrote it.
type chunk struct {
	kind outKind
	data []byte
}

// maxEvent bounds the bytes of one data event made of merged chunks.
const maxEvent = 64 << 10

// proc is one process started by Start: a goroutine in Handle.Exec, its
// input pipe, and its output log.
//
// The log holds the chunks that some connected client has not been sent
// yet or, while nobody is connected, everything written since (up to
// Options.OutputBufferBytes, the oldest dropped beyond). Chunks carry
// sequence numbers; each client (a sub) has the number of the next one
// it is owed, and chunks every client has been sent are dropped.
type proc struct {
	bx      *box
	pid     uint32
	tag     *string
	config  *processpb.ProcessConfig
	pty     bool
	det     detacher // the supervisor owns the command (see detached.go)
	cancel  context.CancelFunc
	signals chan os.Signal
	resize  chan sandbox.WindowSize

	inMu sync.Mutex
	in   *os.File // write end of the input pipe; nil: none or closed

	mu        sync.Mutex
	changed   chan struct{} // closed and replaced at every change
	chunks    []chunk
	first     uint64 // sequence number of chunks[0]
	bytes     int
	dropped   int64
	subs      map[*sub]struct{}
	end       *processpb.ProcessEvent_EndEvent
	stopped   bool // ended or killed: writers never wait
	gone      bool // ended because its sandbox was killed or ended
	collected bool // a client was sent the end
}

// sub is one connected client of a process.
type sub struct{ next uint64 }

func newProc(bx *box, cfg *processpb.ProcessConfig, tag *string, pty bool) *proc {
	return &proc{bx: bx, config: cfg, tag: tag, pty: pty, changed: make(chan struct{}),
		subs: map[*sub]struct{}{}, signals: make(chan os.Signal, 8), resize: make(chan sandbox.WindowSize)}
}

// notify wakes everyone waiting for a change; p.mu is held.
func (p *proc) notify() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// running reports whether the process has not ended.
func (p *proc) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.end == nil
}

// outWriter is an io.Writer of one of the process's streams.
type outWriter struct {
	p    *proc
	kind outKind
}

func (w *outWriter) Write(b []byte) (int, error) {
	w.p.write(w.kind, b)
	return len(b), nil
}

// write appends b to the log. With a client connected, it waits while
// the log is full (the process's output is held back, as a pipe's
// would be); with none, the oldest chunks are dropped to keep the log
// within bounds.
func (p *proc) write(kind outKind, b []byte) {
	data := bytes.Clone(b)
	limit := p.bx.h.opts.OutputBufferBytes
	p.mu.Lock()
	defer p.mu.Unlock()
	for len(p.subs) > 0 && !p.stopped && p.bytes > 0 && p.bytes+len(data) > limit {
		ch := p.changed
		p.mu.Unlock()
		<-ch
		p.mu.Lock()
	}
	if p.end != nil {
		return // cut off with the command's end
	}
	p.chunks = append(p.chunks, chunk{kind, data})
	p.bytes += len(data)
	if len(p.subs) == 0 {
		for p.bytes > limit && len(p.chunks) > 0 {
			p.dropped += int64(len(p.chunks[0].data))
			p.dropFirst(1)
		}
	}
	p.notify()
}

// dropFirst drops the first n chunks; p.mu is held.
func (p *proc) dropFirst(n int) {
	for _, c := range p.chunks[:n] {
		p.bytes -= len(c.data)
	}
	clear(p.chunks[:n]) // no client reads them any more
	p.chunks = p.chunks[n:]
	p.first += uint64(n)
}

// trim drops the chunks every client has been sent; p.mu is held.
func (p *proc) trim() {
	if len(p.subs) == 0 {
		return
	}
	low := p.first + uint64(len(p.chunks))
	for s := range p.subs {
		low = min(low, s.next)
	}
	if n := int(low - p.first); n > 0 {
		p.dropFirst(n)
	}
}

// subscribe connects a client: the first one connected gets what was
// kept while nobody was, later ones what is written from now on. The
// client must then follow.
func (p *proc) subscribe() *sub {
	s := &sub{}
	p.mu.Lock()
	defer p.mu.Unlock()
	s.next = p.first
	if len(p.subs) > 0 {
		s.next = p.first + uint64(len(p.chunks))
	}
	p.subs[s] = struct{}{}
	return s
}

// unsubscribe disconnects client s.
func (p *proc) unsubscribe(s *sub) {
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.subs, s)
	p.trim()
	p.notify()
}

// follow sends the output owed to client s, then the process's end,
// through send, and disconnects s. It returns when the end was sent,
// when send fails or when ctx ends; with keepalive > 0 it sends a
// keepalive event after that long without another.
func (p *proc) follow(ctx context.Context, s *sub, send func(*processpb.ProcessEvent) error, keepalive time.Duration) error {
	defer p.unsubscribe(s)
	ka := newKeepalive(keepalive)
	defer ka.stop()
	for {
		p.mu.Lock()
		s.next = max(s.next, p.first)
		batch := p.chunks[int(s.next-p.first):]
		end, changed, gone := p.end, p.changed, p.gone
		p.mu.Unlock()
		if len(batch) > 0 {
			for _, ev := range dataEvents(batch) {
				if err := send(ev); err != nil {
					return err
				}
			}
			ka.reset()
			p.mu.Lock()
			s.next += uint64(len(batch))
			p.trim()
			p.notify()
			p.mu.Unlock()
			continue
		}
		if end != nil {
			if err := ctx.Err(); err != nil {
				return err // the client is gone: the end stays for another
			}
			if gone {
				// As envd's connection drops with its sandbox: the SDKs
				// read unavailable as their TimeoutError, not as the
				// command's exit.
				return errSandboxGone()
			}
			// Forgotten before the end goes out, so that a client that
			// got it finds the process gone (the SDK's kill() after
			// wait() says false), as in envd.
			p.mu.Lock()
			p.collected = true
			p.mu.Unlock()
			p.bx.removeProc(p)
			return send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_End{End: end}})
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		case <-ka.c():
			if err := send(&processpb.ProcessEvent{Event: &processpb.ProcessEvent_Keepalive{Keepalive: &processpb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
			ka.reset()
		}
	}
}

// dataEvents turns chunks into data events, merging neighbours of the
// same stream up to maxEvent bytes.
func dataEvents(batch []chunk) []*processpb.ProcessEvent {
	var evs []*processpb.ProcessEvent
	for i := 0; i < len(batch); {
		kind, data := batch[i].kind, batch[i].data
		j := i + 1
		if j < len(batch) && batch[j].kind == kind && len(data)+len(batch[j].data) <= maxEvent {
			data = bytes.Clone(data)
			for ; j < len(batch) && batch[j].kind == kind && len(data)+len(batch[j].data) <= maxEvent; j++ {
				data = append(data, batch[j].data...)
			}
		}
		i = j
		de := &processpb.ProcessEvent_DataEvent{}
		switch kind {
		case kindStdout:
			de.Output = &processpb.ProcessEvent_DataEvent_Stdout{Stdout: data}
		case kindStderr:
			de.Output = &processpb.ProcessEvent_DataEvent_Stderr{Stderr: data}
		default:
			de.Output = &processpb.ProcessEvent_DataEvent_Pty{Pty: data}
		}
		evs = append(evs, &processpb.ProcessEvent{Event: &processpb.ProcessEvent_Data{Data: de}})
	}
	return evs
}

// run runs the command and records its end. in is the read end of the
// input pipe (nil: none). A command of /bin/bash, as the SDKs send,
// runs /bin/sh with the same arguments where the sandbox has no bash.
func (p *proc) run(ctx context.Context, req sandbox.ExecRequest, in *os.File) {
	defer p.cancel()
	res, err := p.bx.exec(ctx, req)
	for errors.Is(err, sandbox.ErrSuspended) && p.bx.waitRunning(ctx) {
		// Paused after the client was told the command started (its
		// start event goes out first): it starts once resumed, as a
		// command frozen by the pause would go on.
		res, err = p.bx.exec(ctx, req)
	}
	if errors.Is(err, sandbox.ErrCommandNotFound) && req.Args[0] == "/bin/bash" {
		req.Args[0] = "/bin/sh"
		res, err = p.bx.exec(ctx, req)
	}
	if in != nil {
		in.Close()
	}
	p.closeInput()
	end := endEvent(res, err)
	gone := p.bx.isClosed() || res == nil && p.bx.ended(ctx)
	p.bx.h.log.Debug("process ended", "sandbox", p.bx.id, "pid", p.pid, "status", end.Status, "sandbox_gone", gone, "dropped_output_bytes", p.droppedBytes())
	p.mu.Lock()
	p.end, p.stopped, p.gone = end, true, gone
	p.notify()
	p.mu.Unlock()
	// Kept for a Connect until a client is sent the end, or for the
	// retention.
	time.AfterFunc(p.bx.h.opts.ExitedRetention, func() { p.bx.removeProc(p) })
}

func (p *proc) droppedBytes() int64 {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.dropped
}

// endEvent describes how the command ended, as envd does with Go's
// os.ProcessState: exited with its code, or "signal: killed" with -1.
func endEvent(res *sandbox.ExecResult, err error) *processpb.ProcessEvent_EndEvent {
	if res == nil {
		msg := err.Error()
		code := int32(sandbox.ExitCode(err))
		if code <= 0 {
			code = 1
		}
		return &processpb.ProcessEvent_EndEvent{ExitCode: code, Status: "error: " + msg, Error: &msg}
	}
	if res.Signal != "" {
		status := "signal: " + res.Signal
		if n := res.ExitCode - 128; n > 0 && n < 65 {
			status = "signal: " + syscall.Signal(n).String()
		}
		return &processpb.ProcessEvent_EndEvent{ExitCode: -1, Status: status, Error: &status}
	}
	status := "exit status " + strconv.Itoa(res.ExitCode)
	end := &processpb.ProcessEvent_EndEvent{ExitCode: int32(res.ExitCode), Exited: true, Status: status}
	if res.ExitCode != 0 {
		end.Error = &status
	}
	return end
}

// input writes b to the process's input (stdin, or its terminal with
// terminal set), within ctx.
func (p *proc) input(ctx context.Context, b []byte, terminal bool) error {
	if terminal != p.pty {
		if p.pty {
			return errFailedPrecondition("the process runs on a terminal: send its input as pty")
		}
		return errFailedPrecondition("the process has no terminal: send its input as stdin")
	}
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.in == nil {
		return errFailedPrecondition(fmt.Sprintf("the input of process %d is closed (or was not asked for: start it with stdin)", p.pid))
	}
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = time.Now().Add(time.Minute)
	}
	_ = p.in.SetWriteDeadline(deadline)
	if _, err := p.in.Write(b); err != nil {
		if errors.Is(err, os.ErrDeadlineExceeded) {
			return errResourceExhausted(fmt.Sprintf("process %d does not read its input", p.pid))
		}
		return errFailedPrecondition(fmt.Sprintf("writing to process %d: %v", p.pid, err))
	}
	return nil
}

// closeInput closes the input pipe: the process reads EOF.
func (p *proc) closeInput() {
	p.inMu.Lock()
	defer p.inMu.Unlock()
	if p.in != nil {
		p.in.Close()
		p.in = nil
	}
}

// signal delivers sig to the command's foreground process group; a
// SIGKILL also kills the whole command, as cancelling its Exec does.
func (p *proc) signal(ctx context.Context, sig syscall.Signal) error {
	if p.det != nil {
		ctx, cancel := context.WithTimeout(ctx, supervisorCallTimeout)
		defer cancel()
		err := p.det.SignalProcess(ctx, int(p.pid), sig)
		if errors.Is(err, supervised.ErrNoProcess) {
			return nil // it has just ended: its end is on its way
		}
		return err
	}
	select {
	case p.signals <- sig:
	default: // a burst of signals: the pending ones stand for it
	}
	if sig == syscall.SIGKILL {
		p.cancel()
	}
	return nil
}

// resizeWait bounds how long a resize waits for the command's terminal
// to take it (a command not started yet, a relay that does not read).
const resizeWait = 5 * time.Second

// setSize hands the terminal its new size and returns once the
// terminal's relay has taken it, so that input sent after the resize is
// read at the new size (E2B's clients resize, then type); it gives up
// when the command has ended, ctx ends, or after resizeWait.
func (p *proc) setSize(ctx context.Context, ws sandbox.WindowSize) {
	t := time.NewTimer(resizeWait)
	defer t.Stop()
	for {
		p.mu.Lock()
		stopped, changed := p.stopped, p.changed
		p.mu.Unlock()
		if stopped {
			return
		}
		select {
		case p.resize <- ws:
			return
		case <-changed:
		case <-ctx.Done():
			return
		case <-t.C:
			return
		}
	}
}

// kill ends the command and stops every wait on it (Forget).
func (p *proc) kill() {
	p.cancel()
	p.closeInput()
	p.mu.Lock()
	p.stopped = true
	p.notify()
	p.mu.Unlock()
}
