package plan

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/route/leastloaded"
)

// TestPlaceFallsThroughToANodeOnProbation: Eligible offers a node on probation only when no
// other node is a candidate, and Fallback gives nothing while a healthy node's breaker is closed.
// With the only other node half-open and its probe out, the placer tried that node alone, was
// refused, and Fallback — seeing the closed breaker of the node on probation — gave nothing: the
// batch failed UNAVAILABLE although a node could take it.
func TestPlaceFallsThroughToANodeOnProbation(t *testing.T) {
	base := 30 * time.Millisecond
	c := startClusterWith(t, 2, cluster.Config{Prior: prior, Forgetting: 0.99,
		Breaker: cluster.BreakerConfig{ConsecutiveFailures: 1, OpenTimeout: 20 * time.Millisecond, HalfOpenProbes: 1},
		Outlier: cluster.OutlierConfig{ConsecutiveSlow: 1, BaseEjection: base, MaxEjection: 10 * base, MaxEjectionPercent: 50}})
	a, b := c.Snapshot()[0], c.Snapshot()[1]
	// b: ejected as an outlier, then back on probation.
	c.ReportSlow(b, time.Now(), 5)
	if !b.Ejected(time.Now()) {
		t.Fatal("b not ejected")
	}
	// a: its breaker opens, half-opens, and its one probe is out.
	done, err := a.Breaker().Allow()
	if err != nil {
		t.Fatal(err)
	}
	done(status.Error(codes.Unavailable, "trip"))
	time.Sleep(max(base, 20*time.Millisecond) + 15*time.Millisecond)
	probe, err := a.Breaker().Allow()
	if err != nil {
		t.Fatalf("a's breaker not half-open: %v", err)
	}
	defer probe(cluster.ErrExcluded)
	if b.Ejected(time.Now()) {
		t.Fatal("b still ejected")
	}
	p := NewPlacer(c, leastloaded.New(0, route.DefaultRand))
	l := p.Place(Work{Features: costmodel.BatchFeatures(10, []int{10}, false)}, nil)
	if l == nil {
		t.Fatal("no lease: a refuses (its probe is out), yet b, on probation with its breaker closed, could take the batch")
	}
	if l.Node != b {
		t.Errorf("leased on %s, want the node on probation", l.Node.Addr())
	}
	l.Release()
}
