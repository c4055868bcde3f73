// Package sleep waits for a duration or a context, whichever ends first: what emulated engines
// and fault injection do in place of work. Safe for concurrent use.
package sleep

import (
	"context"
	"time"
)

// Context waits d, or until ctx ends, and returns ctx's error if it ended first (or at once when
// d ≤ 0 and ctx has already ended).
func Context(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
