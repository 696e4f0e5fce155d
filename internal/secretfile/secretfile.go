// Package secretfile keeps the small secrets tent's network frontends
// authenticate clients with (tent serve's API key, tent mcp's bearer
// token) in files of the state directory: private to the caller, never
// read through a symlink, bounded in size.
package secretfile

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"
)

// LoadOrCreate returns the secret kept in dir/name (what names it in
// errors, such as "API key"), generating one with gen the first time and
// writing it with mode 0600 (dir is created with mode 0700). A file that
// others may read, that is not the caller's, that is a symlink or is
// empty is refused. created reports a new secret.
func LoadOrCreate(dir, name, what string, gen func() string) (secret, path string, created bool, err error) {
	path = filepath.Join(dir, name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", path, false, fmt.Errorf("creating the state directory: %w", err)
	}
	b, err := ReadPrivate(path, what)
	if err == nil {
		secret = strings.TrimSpace(string(b))
		if secret == "" {
			return "", path, false, fmt.Errorf("%s file %s is empty: remove it to have a new one generated", what, path)
		}
		return secret, path, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", path, false, err
	}
	secret = gen()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", path, false, fmt.Errorf("writing the %s: %w", what, err)
	}
	_, werr := f.WriteString(secret + "\n")
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(path)
		return "", path, false, fmt.Errorf("writing the %s %s: %w", what, path, err)
	}
	return secret, path, true, nil
}

// ReadPrivate reads a file of at most 4 KiB that must be a regular file
// of the caller's, unreadable by others, without following a symlink.
func ReadPrivate(path, what string) ([]byte, error) { return ReadPrivateMax(path, what, 4096) }

// ReadPrivateMax is ReadPrivate for a file of at most max bytes.
func ReadPrivateMax(path, what string, max int64) ([]byte, error) {
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
		return nil, fmt.Errorf("%s file %s is not a regular file", what, path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("%s file %s has mode %v: others may read it; chmod 600 it (and use a new one)", what, path, fi.Mode().Perm())
	case ok && int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("%s file %s belongs to uid %d, not to you (uid %d)", what, path, st.Uid, os.Geteuid())
	case fi.Size() > max:
		return nil, fmt.Errorf("%s file %s is over %d bytes", what, path, max)
	}
	return io.ReadAll(io.LimitReader(f, max))
}

// IsLoopback reports whether host (a listen address's host part) is
// localhost or a loopback address.
func IsLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}

// CheckListenAddr refuses to serve without TLS on an address other than
// loopback, unless insecure: secret (what the clients authenticate with,
// such as "the API key") and everything served would cross the network
// in clear.
func CheckListenAddr(addr string, tls, insecure bool, secret string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT: %w", addr, err)
	}
	if tls || insecure || IsLoopback(host) {
		return nil
	}
	return fmt.Errorf("--listen %s is not a loopback address: serving there needs TLS (--tls-cert and --tls-key), or --insecure to send %s in clear anyway", addr, secret)
}
