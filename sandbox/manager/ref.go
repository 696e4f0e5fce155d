package manager

import (
	"crypto/rand"
	"encoding/hex"
)

// newLeaseID returns a fresh random lease id (16 hex digits).
func newLeaseID() string {
	var b [8]byte
	_, _ = rand.Read(b[:])
	return hex.EncodeToString(b[:])
}
