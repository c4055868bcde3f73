package faults

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestScenarioWaitsForEjectionsToEnd: a scenario starts on the whole cluster. An ejection
// outlives the scenario that caused it, and the proxy ejects at most a share of the nodes at
// once, so the next scenario would run one node short and could not eject its own slowed node:
// the suite waits for the proxy to take every node back, and says which ones it could not.
func TestScenarioWaitsForEjectionsToEnd(t *testing.T) {
	var polls atomic.Int32
	var stuck atomic.Bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := polls.Add(1)
		ejected := stuck.Load() || n <= 3
		fmt.Fprintf(w, `[{"addr":"127.0.0.1:7101","healthy":true,"ejected":%v},{"addr":"127.0.0.1:7102","healthy":true,"stalled":%v}]`, ejected, n <= 2)
	}))
	defer srv.Close()
	e := &env{log: io.Discard, client: srv.Client()}
	e.pcfg.HTTPAddr = strings.TrimPrefix(srv.URL, "http://")
	ctx := context.Background()
	if err := e.waitNoneEjected(ctx, 5*time.Second); err != nil {
		t.Fatal(err)
	}
	if n := polls.Load(); n < 4 {
		t.Errorf("returned after %d polls, while node 1 was still ejected", n)
	}
	stuck.Store(true)
	err := e.waitNoneEjected(ctx, 200*time.Millisecond)
	if err == nil || !strings.Contains(err.Error(), "127.0.0.1:7101") || strings.Contains(err.Error(), "7102") {
		t.Errorf("a node ejected for good: %v; want an error naming it alone", err)
	}
}
