//go:build linux

package kernels

import (
	"time"

	"golang.org/x/sys/unix"
)

// gemmThreadCPU is the CPU time of the calling OS thread (the goroutine must be locked to it):
// on a shared machine a one-thread measurement then counts only the time the thread ran.
func gemmThreadCPU() (time.Duration, bool) {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return 0, false
	}
	return time.Duration(ts.Nano()), true
}
