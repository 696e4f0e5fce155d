package mcp

import (
	"crypto/rand"
	"encoding/hex"

	"github.com/tent-sandbox/tent/internal/secretfile"
)

// TokenFile is the bearer token's file in the state directory.
const TokenFile = "mcp-token"

// LoadOrCreateToken returns the bearer token kept in dir (the state
// directory), generating one the first time: 32 random bytes in hex,
// written with mode 0600 (the directory is created with mode 0700). A
// token file that others may read, that is not the caller's, or that is
// a symlink is refused. created reports a new token.
func LoadOrCreateToken(dir string) (token, path string, created bool, err error) {
	return secretfile.LoadOrCreate(dir, TokenFile, "token", func() string {
		raw := make([]byte, 32)
		_, _ = rand.Read(raw)
		return hex.EncodeToString(raw)
	})
}

// CheckListenAddr refuses to serve plain HTTP on an address other than
// loopback unless insecure: the bearer token, and every file and command
// output, would cross the network in clear.
func CheckListenAddr(addr string, tls, insecure bool) error {
	return secretfile.CheckListenAddr(addr, tls, insecure, "the token and the sandboxes' files")
}
