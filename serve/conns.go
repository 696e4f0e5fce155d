package serve

import (
	"context"
	"net"
	"net/http"
	"sync"
	"time"
)

// Bounds on the connections of clients that have not authenticated (no
// request with the API key or a sandbox's token yet): so that a client
// without a key cannot fill the server's DefaultMaxConns with idle
// connections and starve the clients that have one.
const (
	// DefaultMaxUnauthConnsPerPeer bounds one peer address's
	// unauthenticated connections.
	DefaultMaxUnauthConnsPerPeer = 128
	// DefaultMaxUnauthConns bounds every peer's together, well below
	// DefaultMaxConns: authenticated clients always find room.
	DefaultMaxUnauthConns = DefaultMaxConns / 2
)

// connGuard tracks the server's connections, as http.Server's
// ConnContext and ConnState hooks report them, and bounds the
// unauthenticated ones per peer and in total. When a new connection
// would exceed a bound, the oldest unauthenticated connection of the
// same peer (or of any peer, for the total) that is not in the middle of
// a request is closed; when there is none, the new one is. An
// unauthenticated connection's idle time is bounded separately too: it
// must send its request headers within readHeaderTimeout, and every
// refusal of a request without valid credentials closes its connection
// (Connection: close), so it never waits idleTimeout.
type connGuard struct {
	perPeer, total int

	mu     sync.Mutex
	conns  map[net.Conn]*trackedConn
	unauth int
	byPeer map[string]int // unauthenticated connections per peer
}

// trackedConn is one connection's entry. authed and busy are guarded by
// connGuard.mu.
type trackedConn struct {
	c      net.Conn
	peer   string
	since  time.Time
	authed bool
	busy   bool // a request is being read or served
}

type connKey struct{}

func newConnGuard(perPeer, total int) *connGuard {
	return &connGuard{perPeer: perPeer, total: total, conns: map[net.Conn]*trackedConn{}, byPeer: map[string]int{}}
}

// peerOf is the address a connection comes from, without its port
// ("" when unknown: a unix socket's peers are all one).
func peerOf(c net.Conn) string {
	if a, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return a.IP.String()
	}
	return ""
}

// connContext is http.Server.ConnContext: it registers c, making room
// for it, and puts its entry in the context its requests see.
func (g *connGuard) connContext(ctx context.Context, c net.Conn) context.Context {
	tc := &trackedConn{c: c, peer: peerOf(c), since: time.Now()}
	var evict []net.Conn
	g.mu.Lock()
	g.conns[c] = tc
	g.unauth++
	g.byPeer[tc.peer]++
	if g.byPeer[tc.peer] > g.perPeer {
		evict = append(evict, g.evictLocked(tc.peer, true, tc))
	}
	if g.unauth > g.total {
		evict = append(evict, g.evictLocked("", false, tc))
	}
	g.mu.Unlock()
	for _, e := range evict {
		_ = e.Close()
	}
	return context.WithValue(ctx, connKey{}, tc)
}

// evictLocked unregisters and returns the oldest unauthenticated
// connection not serving a request (of peer, when byPeer), or self when
// there is none. The caller closes it.
func (g *connGuard) evictLocked(peer string, byPeer bool, self *trackedConn) net.Conn {
	old := self
	for _, tc := range g.conns {
		if tc.authed || tc.busy || byPeer && tc.peer != peer {
			continue
		}
		if tc.since.Before(old.since) {
			old = tc
		}
	}
	if g.conns[old.c] == old {
		delete(g.conns, old.c)
		g.dropUnauthLocked(old)
	}
	return old.c
}

// connState is http.Server.ConnState.
func (g *connGuard) connState(c net.Conn, st http.ConnState) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tc := g.conns[c]
	if tc == nil {
		return
	}
	switch st {
	case http.StateActive:
		tc.busy = true
	case http.StateIdle:
		tc.busy = false
	case http.StateClosed, http.StateHijacked:
		delete(g.conns, c) // unless evicted already
		if !tc.authed {
			g.dropUnauthLocked(tc)
		}
	}
}

func (g *connGuard) dropUnauthLocked(tc *trackedConn) {
	g.unauth--
	if g.byPeer[tc.peer]--; g.byPeer[tc.peer] <= 0 {
		delete(g.byPeer, tc.peer)
	}
}

// authenticated marks the connection of a request whose credentials
// were valid: it no longer counts against the unauthenticated bounds.
func (g *connGuard) authenticated(r *http.Request) {
	tc, _ := r.Context().Value(connKey{}).(*trackedConn)
	if g == nil || tc == nil {
		return
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if !tc.authed && g.conns[tc.c] == tc {
		tc.authed = true
		g.dropUnauthLocked(tc)
	}
}

// isAuthenticated reports whether r's connection has authenticated (true
// when the server does not track it: it then keeps it open as before).
func (g *connGuard) isAuthenticated(r *http.Request) bool {
	tc, _ := r.Context().Value(connKey{}).(*trackedConn)
	if g == nil || tc == nil {
		return true
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	return tc.authed
}
