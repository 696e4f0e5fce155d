package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/tent-sandbox/tent/namespaces"
)

// maxPublishedConns caps the connections a sandbox's published ports
// carry at once, all ports together. One more is accepted and closed at
// once: a client flooding a published port costs the host no more than
// this many pairs of sockets and goroutines.
const maxPublishedConns = 256

// publishDialTimeout bounds the wait for a connection inside the sandbox.
const publishDialTimeout = 10 * time.Second

// publisher serves a sandbox's published ports: a listener on the host
// per port, each connection dialled inside the sandbox through its init.
type publisher struct {
	init *namespaces.Init
	log  *slog.Logger

	mu      sync.Mutex
	ports   []*published
	conns   map[net.Conn]struct{}
	active  int  // connections being served
	stopped bool // stop: accept loops ended (a hand-off); start resumes
	closed  bool
	wg      sync.WaitGroup // accept loops and connections
	loops   sync.WaitGroup // accept loops
	next    atomic.Uint64  // dial request ids
}

// published is one port: its mapping (HostPort as bound) and its
// listening socket, kept as a descriptor for a hand-off.
type published struct {
	m  PortMapping
	fd int
	l  net.Listener // nil while stopped
}

func newPublisher(init *namespaces.Init, log *slog.Logger) *publisher {
	return &publisher{init: init, log: log, conns: map[net.Conn]struct{}{}}
}

// add listens on the host for m and serves it; it returns m with the
// port actually bound.
func (p *publisher) add(m PortMapping) (PortMapping, error) {
	if err := m.validate(); err != nil {
		return PortMapping{}, invalid(fmt.Errorf("ports: %w", err))
	}
	ip := m.HostIP
	if ip == "" {
		ip = "127.0.0.1"
	}
	l, err := net.Listen("tcp", net.JoinHostPort(ip, strconv.Itoa(m.HostPort)))
	if err != nil {
		return PortMapping{}, fmt.Errorf("publishing port %d: %w", m.Port, err)
	}
	// A copy of the socket for a hand-off, made without os.File.Fd,
	// which would make the shared description blocking (and the
	// listener's Accept uninterruptible).
	rc, err := l.(*net.TCPListener).SyscallConn()
	if err != nil {
		l.Close()
		return PortMapping{}, fmt.Errorf("publishing port %d: %w", m.Port, err)
	}
	fd := -1
	var derr error
	if err := rc.Control(func(s uintptr) { fd, derr = unix.FcntlInt(s, unix.F_DUPFD_CLOEXEC, 0) }); err != nil || derr != nil {
		l.Close()
		return PortMapping{}, os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", errors.Join(err, derr))
	}
	m.HostPort = l.Addr().(*net.TCPAddr).Port
	pub := &published{m: m, fd: fd, l: l}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		l.Close()
		unix.Close(fd)
		return PortMapping{}, ErrTerminated
	}
	p.ports = append(p.ports, pub)
	if p.stopped {
		l.Close()
		pub.l = nil
		return m, nil
	}
	p.wg.Add(1)
	p.loops.Add(1)
	go p.serve(l, m.Port)
	return m, nil
}

// adopt serves a listening socket a predecessor handed on (fd is taken).
func (p *publisher) adopt(m PortMapping, fd int) error {
	p.mu.Lock()
	p.ports = append(p.ports, &published{m: m, fd: fd})
	p.stopped = true
	p.mu.Unlock()
	return p.start()
}

// busy reports whether a connection is being served.
func (p *publisher) busy() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.active > 0
}

// stop ends the accept loops (connections arriving meanwhile wait in
// the backlogs) and waits for them, so that busy then counts every
// connection accepted; start serves again.
func (p *publisher) stop() {
	p.mu.Lock()
	p.stopped = true
	for _, pub := range p.ports {
		if pub.l != nil {
			pub.l.Close()
			pub.l = nil
		}
	}
	p.mu.Unlock()
	p.loops.Wait()
}

// start undoes stop.
func (p *publisher) start() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed || !p.stopped {
		return nil
	}
	p.stopped = false
	for _, pub := range p.ports {
		d, err := unix.FcntlInt(uintptr(pub.fd), unix.F_DUPFD_CLOEXEC, 0)
		if err != nil {
			return os.NewSyscallError("fcntl(F_DUPFD_CLOEXEC)", err)
		}
		f := os.NewFile(uintptr(d), "tent-published")
		l, err := net.FileListener(f)
		f.Close()
		if err != nil {
			return fmt.Errorf("published port %d: %w", pub.m.Port, err)
		}
		pub.l = l
		p.wg.Add(1)
		p.loops.Add(1)
		go p.serve(l, pub.m.Port)
	}
	return nil
}

// fds returns the listening sockets' descriptors with their mappings
// (owned by p).
func (p *publisher) fds() ([]PortMapping, []int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var ms []PortMapping
	var fds []int
	for _, pub := range p.ports {
		ms, fds = append(ms, pub.m), append(fds, pub.fd)
	}
	return ms, fds
}

// close stops listening, cuts every connection and waits for every
// goroutine; it is idempotent.
func (p *publisher) close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	for _, pub := range p.ports {
		if pub.l != nil {
			pub.l.Close()
		}
		unix.Close(pub.fd)
	}
	for c := range p.conns {
		c.Close()
	}
	p.mu.Unlock()
	p.wg.Wait()
}

func (p *publisher) serve(l net.Listener, port int) {
	defer p.wg.Done()
	defer p.loops.Done()
	for {
		c, err := l.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			if errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE) || errors.Is(err, syscall.ECONNABORTED) {
				time.Sleep(10 * time.Millisecond)
				continue
			}
			p.log.Warn("published port: accept failed", "port", port, "err", err)
			return
		}
		p.mu.Lock()
		if p.closed || p.active >= maxPublishedConns {
			p.mu.Unlock()
			c.Close()
			continue
		}
		p.active++
		p.conns[c] = struct{}{}
		p.wg.Add(1)
		p.mu.Unlock()
		go func() {
			defer p.wg.Done()
			p.handle(c, port)
			p.mu.Lock()
			delete(p.conns, c)
			p.active--
			p.mu.Unlock()
		}()
	}
}

// connect returns a connection to port of the sandbox's loopback:
// 127.0.0.1, then ::1 when nothing listens there (a server on ::1 only).
func (p *publisher) connect(ctx context.Context, port int) (net.Conn, error) {
	in, err := p.dial(ctx, port, false)
	if errors.Is(err, syscall.ECONNREFUSED) {
		in, err = p.dial(ctx, port, true)
	}
	return in, err
}

// handle connects c to port inside the sandbox and copies both ways.
func (p *publisher) handle(c net.Conn, port int) {
	defer c.Close()
	in, err := p.connect(context.Background(), port)
	if err != nil {
		p.log.Debug("published port: no connection inside", "port", port, "err", err)
		if tc, ok := c.(*net.TCPConn); ok {
			_ = tc.SetLinger(0) // the client sees a reset, as from a closed port
		}
		return
	}
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		in.Close()
		return
	}
	p.conns[in] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.conns, in)
		p.mu.Unlock()
		in.Close()
	}()
	done := make(chan struct{})
	go func() {
		defer close(done)
		copyHalf(in, c)
	}()
	copyHalf(c, in)
	<-done
}

// copyHalf copies src to dst, then half-closes dst (or closes both after
// an error, which ends the other direction too).
func copyHalf(dst, src net.Conn) {
	_, err := io.Copy(dst, src)
	if err == nil {
		if cw, ok := dst.(interface{ CloseWrite() error }); ok && cw.CloseWrite() == nil {
			return
		}
	}
	dst.Close()
	src.Close()
}

// dial asks the init for a connection to port of the sandbox's loopback
// and waits until it is established (publishDialTimeout at most, and no
// longer than ctx).
func (p *publisher) dial(ctx context.Context, port int, v6 bool) (net.Conn, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	fd, err := p.init.Dial("dial-"+strconv.FormatUint(p.next.Add(1), 10), port, v6)
	if err != nil {
		return nil, err
	}
	f := os.NewFile(uintptr(fd), "tent-published-conn")
	c, err := net.FileConn(f)
	f.Close()
	if err != nil {
		return nil, err
	}
	rc, err := c.(*net.TCPConn).SyscallConn()
	if err != nil {
		c.Close()
		return nil, err
	}
	deadline := time.Now().Add(publishDialTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = c.SetWriteDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = c.SetWriteDeadline(time.Unix(1, 0)) })
	var soErr error
	werr := rc.Write(func(fd uintptr) bool {
		n, err := unix.GetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_ERROR)
		if err != nil {
			soErr = err
			return true
		}
		if n != 0 {
			soErr = syscall.Errno(n)
			return true
		}
		if _, err := unix.Getpeername(int(fd)); errors.Is(err, unix.ENOTCONN) {
			return false // still connecting: wait until writable
		}
		return true
	})
	cancelled := !stop()
	_ = c.SetWriteDeadline(time.Time{})
	if err := errors.Join(werr, soErr); err != nil || cancelled {
		c.Close()
		if cancelled {
			err = ctx.Err()
		}
		return nil, fmt.Errorf("connecting to port %d inside: %w", port, err)
	}
	return c, nil
}

// DialPort connects to TCP port of the sandbox's loopback, inside its
// own network namespace (127.0.0.1, then ::1 when nothing listens
// there), as a published port's connections are, and returns the
// connection: the host side of a reverse proxy, for example (tent serve's
// getHost). The caller owns the connection and bounds how many it holds;
// it ends when either side closes it or the sandbox is terminated. It
// fails with ErrUnsupported for a sandbox without a network namespace of
// its own (mode host, the reduced tier), ErrInvalidSpec for a port
// outside 1-65535, and a connection refused (syscall.ECONNREFUSED) when
// nothing listens.
func (s *Sandbox) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, invalid(fmt.Errorf("port %d is not in 1-65535", port))
	}
	s.mu.Lock()
	if err := s.checkRunning("connecting to a port"); err != nil {
		s.mu.Unlock()
		return nil, err
	}
	s.mu.Unlock()
	if s.run.pub == nil {
		return nil, fmt.Errorf("%w: connecting to a port inside needs the sandbox's own network namespace (mode none or limited, full tier)", ErrUnsupported)
	}
	return s.run.pub.connect(ctx, port)
}

// Publish publishes m (see [PortMapping]) on the running sandbox and
// returns it with the host port bound. It fails with ErrInvalidSpec for
// a malformed mapping, and ErrUnsupported for a sandbox without a
// network namespace of its own (mode host, the reduced tier).
func (s *Sandbox) Publish(ctx context.Context, m PortMapping) (PortMapping, error) {
	if err := ctx.Err(); err != nil {
		return PortMapping{}, err
	}
	s.mu.Lock()
	if err := s.checkRunning("publishing a port"); err != nil {
		s.mu.Unlock()
		return PortMapping{}, err
	}
	s.mu.Unlock()
	r := s.run
	if r.pub == nil {
		return PortMapping{}, fmt.Errorf("%w: publishing a port needs the sandbox's own network namespace (mode none or limited, full tier)", ErrUnsupported)
	}
	got, err := r.pub.add(m)
	if err != nil {
		return PortMapping{}, err
	}
	s.mu.Lock()
	s.spec.Ports = append(s.spec.Ports, got)
	s.mu.Unlock()
	return got, nil
}
