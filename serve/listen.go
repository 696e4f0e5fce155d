package serve

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

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
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT: %w", addr, err)
	}
	if tls || insecure || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("--listen %s is not a loopback address: serving there needs TLS (--tls-cert and --tls-key), or --insecure to send the API key in clear anyway", addr)
}

// isLoopback reports whether host is localhost or a loopback address.
func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// keyFile is the API key's file in the state directory.
const keyFile = "serve-api-key"

// LoadOrCreateAPIKey returns the API key kept in dir (the state
// directory), generating one the first time: 20 random bytes in hex
// after "e2b_", written with mode 0600 in a directory created with mode
// 0700. A key file that others may read, or that is not the caller's,
// is refused. created reports a new key.
func LoadOrCreateAPIKey(dir string) (key, path string, created bool, err error) {
	path = filepath.Join(dir, keyFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", path, false, fmt.Errorf("creating the state directory: %w", err)
	}
	b, err := readPrivate(path)
	if err == nil {
		key = strings.TrimSpace(string(b))
		if key == "" {
			return "", path, false, fmt.Errorf("API key file %s is empty: remove it to have a new key generated", path)
		}
		return key, path, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", path, false, err
	}
	raw := make([]byte, 20)
	_, _ = rand.Read(raw)
	key = "e2b_" + hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", path, false, fmt.Errorf("writing the API key: %w", err)
	}
	_, werr := f.WriteString(key + "\n")
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(path)
		return "", path, false, fmt.Errorf("writing the API key %s: %w", path, err)
	}
	return key, path, true, nil
}

// ReadAPIKeyFile reads an API key from path (its first line): a regular
// file of the caller's that others cannot read, as the state
// directory's key file must be.
func ReadAPIKeyFile(path string) (string, error) {
	b, err := readPrivate(path)
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

// readPrivate reads a file that must be the caller's and unreadable by
// others, without following a symlink.
func readPrivate(path string) ([]byte, error) {
	f, err := os.OpenFile(path, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return nil, err
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.Mode().IsRegular():
		return nil, fmt.Errorf("API key file %s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("API key file %s has mode %v: others may read it; chmod 600 it (and use a new key)", path, fi.Mode().Perm())
	case ok && int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("API key file %s belongs to uid %d, not to you (uid %d)", path, st.Uid, os.Geteuid())
	case fi.Size() > 4096:
		return nil, fmt.Errorf("API key file %s is over 4 KiB", path)
	}
	return io.ReadAll(io.LimitReader(f, 4096))
}
