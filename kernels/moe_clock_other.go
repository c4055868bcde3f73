//go:build !linux

package kernels

import "time"

// cpuClock falls back to the wall clock where thread CPU time is not available.
type cpuClock struct{}

func (cpuClock) lock()   {}
func (cpuClock) unlock() {}

func (cpuClock) now() time.Duration { return time.Duration(time.Now().UnixNano()) }

// ProcessCPUTime is 0 outside Linux.
func ProcessCPUTime() time.Duration { return 0 }
