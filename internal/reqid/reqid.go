// Package reqid makes request ids: the one the proxy's core, its HTTP front and its gRPC front
// give a request that came without one. Safe for concurrent use.
package reqid

import (
	"crypto/rand"
	"encoding/hex"
)

// New is a fresh random request id: 32 hex digits.
func New() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on supported platforms
	return hex.EncodeToString(b[:])
}
