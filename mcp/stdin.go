package mcp

import "fmt"

// A background command's stdin is a pipe the sandbox keeps (64 KiB),
// and a write to it waits while the command does not read. process_write
// never waits for the command: it queues its text here, at most
// maxInputPending bytes per command not yet written, and one goroutine
// per command with queued text writes it through the sandbox's Process,
// then ends. This is the only record this package keeps of a command, and
// only while it has input pending; the command itself does not depend on
// it (a server that stops drops what is still queued).

// inputQueue is the text queued for one command.
type inputQueue struct {
	buf      []byte // guarded by Server.mu, as the rest
	inflight int    // bytes the feeder is writing now
	closing  bool   // close its stdin once buf is written
}

// maxInputQueues bounds the commands with input pending at once.
const maxInputQueues = maxProcessRecords

// sendInput queues data for p's stdin and, with close, its end after it.
func (s *Server) sendInput(p *proc, data string, close bool) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return errClosed
	}
	key := p.id()
	q := s.inputs[key]
	if q == nil {
		if len(s.inputs) >= maxInputQueues {
			return fmt.Errorf("%d background commands have input they have not read yet, the most this server keeps: send more once they read it", len(s.inputs))
		}
		q = &inputQueue{}
		s.inputs[key] = q
		s.feeders.Add(1)
		go s.feed(key, q, p)
	}
	if q.closing {
		return fmt.Errorf("the command's input is already closed")
	}
	if pending := len(q.buf) + q.inflight; pending+len(data) > maxInputPending {
		return fmt.Errorf("the command has not read %d bytes of earlier input and at most %d may wait: it is not reading its input; send less, or later", pending, maxInputPending)
	}
	q.buf = append(q.buf, data...)
	q.closing = close
	return nil
}

// inputClosing reports whether p's stdin is to be closed after the input
// queued for it.
func (s *Server) inputClosing(p *proc) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.inputs[p.id()]
	return q != nil && q.closing
}

// feed writes q to p's stdin until it is empty (then closes the stdin if
// asked), the command is gone or the server closes; then it forgets q.
// Once closing is set no more text is queued, so the close comes last.
func (s *Server) feed(key string, q *inputQueue, p *proc) {
	defer s.feeders.Done()
	s.mu.Lock()
	defer s.mu.Unlock()
	defer delete(s.inputs, key)
	for len(q.buf) > 0 || q.closing {
		data, closing := q.buf, q.closing
		q.buf, q.inflight = nil, len(data)
		s.mu.Unlock()
		var err error
		if len(data) > 0 {
			err = p.p.WriteStdin(s.feedCtx, data)
		}
		if err == nil && closing {
			err = p.p.CloseStdin(s.feedCtx)
		}
		s.mu.Lock()
		q.inflight = 0
		if err != nil {
			s.log.Debug("mcp: writing a background command's input", "id", key, "err", err)
			return
		}
		if closing {
			return
		}
	}
}
