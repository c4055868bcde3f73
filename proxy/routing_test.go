package proxy

import (
	"context"
	"math"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// TestNonFiniteReportedLoad: a node whose replies carry a NaN or infinite backlog must not
// poison routing, splitting or admission: requests keep succeeding on the whole cluster.
func TestNonFiniteReportedLoad(t *testing.T) {
	for _, bad := range []float64{math.NaN(), math.Inf(1)} {
		nodes := startNodes(t, 2, fakenode.Options{Coeffs: costmodel.Coeffs{A: 1e-6, C: 1e-4}})
		nodes[0].SetReportedLoad(bad)
		cfg := testConfig(nodes.Addrs())
		cfg.SLO = 2 * time.Second
		cfg.Admission.MinSamples = 1
		p, _ := startProxy(t, cfg)
		for i := range 30 {
			if _, err := p.Score(context.Background(), makeRequest(20, uint64(i))); err != nil {
				t.Fatalf("reported load %v: request %d: %v", bad, i, err)
			}
		}
		for _, s := range p.Nodes() {
			if math.IsNaN(s.BacklogSeconds) || math.IsInf(s.BacklogSeconds, 0) {
				t.Errorf("reported load %v: node %s backlog %v", bad, s.Addr, s.BacklogSeconds)
			}
		}
	}
}
