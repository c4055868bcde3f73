package calibrate

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// ProcessCPUTime returns a reader of the CPU time of process pid: the sum over its threads of
// the on-CPU nanoseconds in /proc/<pid>/task/<tid>/schedstat (Linux; nanosecond resolution,
// unlike the 10 ms ticks of /proc/<pid>/stat).
func ProcessCPUTime(pid int) func() (time.Duration, error) {
	return func() (time.Duration, error) {
		tasks, err := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
		if err != nil || len(tasks) == 0 {
			return 0, fmt.Errorf("process %d: no /proc/%d/task/*/schedstat (not Linux, or no such process)", pid, pid)
		}
		var total int64
		for _, t := range tasks {
			b, err := os.ReadFile(t)
			if err != nil {
				continue // a thread that exited between Glob and ReadFile
			}
			f := strings.Fields(string(b))
			if len(f) == 0 {
				continue
			}
			ns, err := strconv.ParseInt(f[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("parse %s: %w", t, err)
			}
			total += ns
		}
		return time.Duration(total), nil
	}
}
