package cluster

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestSeedBoundComparesPeersOfTheSameKind: configs/backends/infinity.yaml runs one of our CPU scorer
// nodes beside Infinity (GPU) servers. The scorer's honest calibrated model was compared with the
// median of its peers' learned models — the Infinity nodes', another kind of hardware — and,
// more than seedTrust off, was thrown away: the node lost its calibration samples and warmed up.
func TestSeedBoundComparesPeersOfTheSameKind(t *testing.T) {
	truth := costmodel.Coeffs{A: 5e-4, B: 2e-7, C: 0.1}
	gpu := scaled(truth, 1.0/20) // an HTTP server 20× faster than the CPU scorer
	c, peers, d := seedCluster(gpu)
	for _, p := range peers {
		p.kind = "infinity"
	}
	d.Observe(seedReply(truth, 1<<20), time.Now())
	c.Eligible(nil)
	if s := d.Samples(); s != 1<<20 {
		t.Errorf("scorer node's own calibrated model (%d samples) refused because its peers of another kind are 20× faster: %d samples", 1<<20, s)
	}
}

// TestStatusSaysWhichNodesAreEmulated: a node whose replies say it runs the emulated engine is
// marked so in the status /v1/nodes serves (bench load labels its figures EMULATED from it); the
// others are not.
func TestStatusSaysWhichNodesAreEmulated(t *testing.T) {
	c, _, d := seedCluster(costmodel.Coeffs{A: 5e-4, B: 2e-7, C: 0.1})
	d.Observe(&relevancev1.ScoreBatchResponse{Emulated: true}, time.Now())
	for _, st := range c.Status() {
		if want := st.Addr == d.Addr(); st.Emulated != want {
			t.Errorf("node %s: emulated %v, want %v", st.Addr, st.Emulated, want)
		}
	}
}

// TestIgnoredSeedIsLogged: a node's own model ignored as far from its peers' is said in the log
// (it showed only as a low samples count in /v1/nodes).
func TestIgnoredSeedIsLogged(t *testing.T) {
	truth := costmodel.Coeffs{A: 5e-4, B: 2e-7, C: 0.1}
	_, _, d := seedCluster(truth)
	var buf bytes.Buffer
	d.log = slog.New(slog.NewTextHandler(&buf, nil))
	d.Observe(seedReply(scaled(truth, 100), 1<<30), time.Now())
	if out := buf.String(); !strings.Contains(out, "far from its peers") || !strings.Contains(out, "node=d:1") {
		t.Errorf("log %q, want the ignored seed named with its node", out)
	}
}
