//go:build linux

package kernels

import (
	"runtime"
	"time"

	"golang.org/x/sys/unix"
)

// cpuClock measures the CPU time of the calling thread: on a machine shared with other work a
// measurement then counts only the cycles this thread got, not the time it waited for a core.
// lock pins the goroutine to its thread for the measurement; unlock undoes it.
type cpuClock struct{}

func (cpuClock) lock()   { runtime.LockOSThread() }
func (cpuClock) unlock() { runtime.UnlockOSThread() }

// now returns the thread's CPU time, or the wall clock where that is unavailable.
func (cpuClock) now() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_THREAD_CPUTIME_ID, &ts); err != nil {
		return time.Duration(time.Now().UnixNano())
	}
	return time.Duration(ts.Nano())
}

// ProcessCPUTime is the CPU time all threads of this process have used (user + system); on
// other systems than Linux it is 0. Benchmarks on shared machines report it beside wall time.
func ProcessCPUTime() time.Duration {
	var ts unix.Timespec
	if err := unix.ClockGettime(unix.CLOCK_PROCESS_CPUTIME_ID, &ts); err != nil {
		return 0
	}
	return time.Duration(ts.Nano())
}
