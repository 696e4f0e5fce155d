package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/tent-sandbox/tent/internal/secretfile"
	"golang.org/x/net/netutil"
)

// HTTP server bounds: a client must send its request headers within
// readHeaderTimeout, may keep an idle connection idleTimeout, and sends
// at most maxHeaderBytes of headers. Request bodies and streams are
// bounded per request (see [Options]).
const (
	readHeaderTimeout = 10 * time.Second
	idleTimeout       = 2 * time.Minute
	maxHeaderBytes    = 64 << 10
	// DefaultMaxConns bounds the connections open at once.
	DefaultMaxConns = 1024
	// shutdownGrace is how long Serve waits for requests in flight to end
	// after its context is done; streams still open are then cut.
	shutdownGrace = 5 * time.Second
)

// HTTPServer returns an http.Server for s with the server's timeouts
// and its bounds on unauthenticated connections (see
// DefaultMaxUnauthConnsPerPeer); use one per Server.
func (s *Server) HTTPServer() *http.Server {
	return &http.Server{
		Handler:           s,
		ReadHeaderTimeout: readHeaderTimeout,
		IdleTimeout:       idleTimeout,
		MaxHeaderBytes:    maxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(s.log.Handler(), slog.LevelDebug),
		ConnContext:       s.conns.connContext,
		ConnState:         s.conns.connState,
	}
}

// Serve serves s on l, at most DefaultMaxConns connections at once,
// until ctx is done; it then stops accepting, lets requests in flight
// end for a few seconds, closes the rest and returns nil. It does not
// call Close. Wrap l with tls.NewListener to serve HTTPS.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	hs := s.HTTPServer()
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(netutil.LimitListener(l, DefaultMaxConns)) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		_ = hs.Close()
	}
	<-errc
	return nil
}

// CheckListenAddr refuses to serve without TLS on an address other
// than loopback, unless insecure: the API key and the sandboxes' tokens
// would cross the network in clear.
func CheckListenAddr(addr string, tls, insecure bool) error {
	return secretfile.CheckListenAddr(addr, tls, insecure, "the API key")
}

// keyFile is the API key's file in the state directory.
const keyFile = "serve-api-key"

// LoadOrCreateAPIKey returns the API key kept in dir (the state
// directory), generating one the first time: 20 random bytes in hex
// after "e2b_", written with mode 0600 in a directory created with mode
// 0700. A key file that others may read, or that is not the caller's,
// is refused. created reports a new key.
func LoadOrCreateAPIKey(dir string) (key, path string, created bool, err error) {
	return secretfile.LoadOrCreate(dir, keyFile, "API key", func() string {
		raw := make([]byte, 20)
		_, _ = rand.Read(raw)
		return "e2b_" + hex.EncodeToString(raw)
	})
}

// ReadAPIKeyFile reads an API key from path (its first line): a regular
// file of the caller's that others cannot read, as the state
// directory's key file must be.
func ReadAPIKeyFile(path string) (string, error) {
	b, err := secretfile.ReadPrivate(path, "API key")
	if err != nil {
		return "", err
	}
	line, _, _ := strings.Cut(string(b), "\n")
	key := strings.TrimSpace(line)
	if key == "" {
		return "", fmt.Errorf("API key file %s is empty", path)
	}
	return key, nil
}
