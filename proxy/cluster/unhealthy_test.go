package cluster

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// TestNodeStatusSaysWhyANodeIsUnhealthy: "healthy": false alone left an operator guessing
// whether a node was never reachable (a wrong address) or draining. /v1/nodes says which, and
// nothing once the node passes its check again.
func TestNodeStatusSaysWhyANodeIsUnhealthy(t *testing.T) {
	fc, err := fakenode.StartCluster(1, fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(fc.Close)
	c := New(Config{Static: append(fc.Addrs(), "127.0.0.1:1"), Prior: testPrior, Forgetting: 0.99,
		Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
	defer c.Close()
	if err := c.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	why := func(addr string) (bool, string) {
		for _, st := range c.Status() {
			if st.Addr == addr {
				return st.Healthy, st.Unhealthy
			}
		}
		t.Fatalf("no node %s in %+v", addr, c.Status())
		return false, ""
	}
	wait := func(addr, what string, ok func(bool, string) bool) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			h, w := why(addr)
			if ok(h, w) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: healthy %v, unhealthy %q; want %s", addr, h, w, what)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	wait("127.0.0.1:1", "a health check error", func(h bool, w string) bool { return !h && strings.HasPrefix(w, "health check: ") })
	up := fc.Addrs()[0]
	wait(up, "healthy, no reason", func(h bool, w string) bool { return h && w == "" })
	fc[0].SetServing(false)
	wait(up, "NOT_SERVING", func(h bool, w string) bool { return !h && strings.Contains(w, "NOT_SERVING") })
	fc[0].SetServing(true)
	wait(up, "healthy again, no reason", func(h bool, w string) bool { return h && w == "" })
}
