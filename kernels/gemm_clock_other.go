//go:build !linux

package kernels

import "time"

// gemmThreadCPU is unavailable here: measurements fall back to the wall clock.
func gemmThreadCPU() (time.Duration, bool) { return 0, false }
