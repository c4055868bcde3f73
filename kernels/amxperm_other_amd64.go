//go:build !purego && !linux

package kernels

// requestAMX: only the Linux permission protocol is implemented; elsewhere AMX stays unused.
func requestAMX() bool { return false }
