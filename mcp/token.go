package mcp

import (
	"crypto/rand"
	"encoding/hex"
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

// TokenFile is the bearer token's file in the state directory.
const TokenFile = "mcp-token"

// LoadOrCreateToken returns the bearer token kept in dir (the state
// directory), generating one the first time: 32 random bytes in hex,
// written with mode 0600 (the directory is created with mode 0700). A
// token file that others may read, that is not the caller's, or that is
// a symlink is refused. created reports a new token.
func LoadOrCreateToken(dir string) (token, path string, created bool, err error) {
	path = filepath.Join(dir, TokenFile)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", path, false, fmt.Errorf("creating the state directory: %w", err)
	}
	b, err := readPrivate(path)
	if err == nil {
		token = strings.TrimSpace(string(b))
		if token == "" {
			return "", path, false, fmt.Errorf("token file %s is empty: remove it to have a new token generated", path)
		}
		return token, path, false, nil
	}
	if !errors.Is(err, fs.ErrNotExist) {
		return "", path, false, err
	}
	raw := make([]byte, 32)
	_, _ = rand.Read(raw)
	token = hex.EncodeToString(raw)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|syscall.O_NOFOLLOW, 0o600)
	if err != nil {
		return "", path, false, fmt.Errorf("writing the token: %w", err)
	}
	_, werr := f.WriteString(token + "\n")
	if err := errors.Join(werr, f.Sync(), f.Close()); err != nil {
		_ = os.Remove(path)
		return "", path, false, fmt.Errorf("writing the token %s: %w", path, err)
	}
	return token, path, true, nil
}

// readPrivate reads a small file that must be the caller's and
// unreadable by others, without following a symlink.
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
		return nil, fmt.Errorf("token file %s is not a regular file", path)
	case fi.Mode().Perm()&0o077 != 0:
		return nil, fmt.Errorf("token file %s has mode %v: others may read it; chmod 600 it (and use a new token)", path, fi.Mode().Perm())
	case ok && int(st.Uid) != os.Geteuid():
		return nil, fmt.Errorf("token file %s belongs to uid %d, not to you (uid %d)", path, st.Uid, os.Geteuid())
	case fi.Size() > 4096:
		return nil, fmt.Errorf("token file %s is over 4 KiB", path)
	}
	return io.ReadAll(io.LimitReader(f, 4096))
}

// CheckListenAddr refuses to serve plain HTTP on an address other than
// loopback unless insecure: the bearer token, and every file and command
// output, would cross the network in clear.
func CheckListenAddr(addr string, tls, insecure bool) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--listen %q: want HOST:PORT: %w", addr, err)
	}
	if tls || insecure || isLoopback(host) {
		return nil
	}
	return fmt.Errorf("--listen %s is not a loopback address: serving there needs TLS (--tls-cert and --tls-key), or --insecure to send the token and the sandboxes' files in clear anyway", addr)
}

func isLoopback(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	ip, err := netip.ParseAddr(host)
	return err == nil && ip.IsLoopback()
}
