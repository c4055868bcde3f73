package cluster

import (
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// testPrior is a cost model of the order of the small model's.
var testPrior = costmodel.Coeffs{A: 6.7e-4, B: 3.8e-7, C: 0.14}

func startNodes(t *testing.T, n int) []string {
	t.Helper()
	c, err := fakenode.StartCluster(n, fakenode.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	return c.Addrs()
}

// TestMembershipChurnForgetsDrainedNodes: nodes that left and have nothing in flight are
// forgotten once their grace for calls leased just before they left is over, so DNS churn over a
// long uptime does not grow the proxy's memory.
func TestMembershipChurnForgetsDrainedNodes(t *testing.T) {
	defer func(g time.Duration) { leftGrace = g }(leftGrace)
	leftGrace = 10 * time.Millisecond
	addrs := startNodes(t, 1)
	c := New(Config{DNS: "scorer.test:1", DNSInterval: time.Hour, Prior: testPrior, Forgetting: 0.99,
		Breaker: BreakerConfig{ConsecutiveFailures: 5, OpenTimeout: time.Second, HalfOpenProbes: 1}}, nil)
	defer c.Close()
	for range 50 {
		if err := c.setMembers(addrs); err != nil {
			t.Fatal(err)
		}
		if err := c.setMembers([]string{}); err != nil {
			t.Fatal(err)
		}
	}
	time.Sleep(100 * time.Millisecond) // every grace over: the next update forgets them
	if err := c.setMembers([]string{}); err != nil {
		t.Fatal(err)
	}
	c.membersMu.Lock()
	gone := len(c.gone)
	c.membersMu.Unlock()
	if gone > 1 {
		t.Errorf("%d departed nodes kept after 50 idle join/leave cycles, want at most 1", gone)
	}
}
