package sleep

import (
	"context"
	"errors"
	"testing"
	"time"
)

func TestContextWaitsOrEndsWithTheContext(t *testing.T) {
	if err := Context(context.Background(), time.Millisecond); err != nil {
		t.Errorf("a full wait returned %v", err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	if err := Context(ctx, time.Minute); !errors.Is(err, context.Canceled) {
		t.Errorf("a cancelled wait returned %v, want context.Canceled", err)
	}
	if el := time.Since(start); el > time.Second {
		t.Errorf("a cancelled wait took %v", el)
	}
	if err := Context(ctx, 0); !errors.Is(err, context.Canceled) {
		t.Errorf("a zero wait on an ended context returned %v", err)
	}
}
