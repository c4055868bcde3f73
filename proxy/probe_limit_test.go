package proxy

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/cluster"
)

// TestProbeFitsTheNodesItemLimit: a node back from an ejection is probed with a copy of the
// request's smallest batch, but the batches were cut for the other nodes (the node on probation
// is no planning candidate), so that batch may hold more documents than the node takes per
// request (TEI: 32). Sent whole, every probe was refused as over the limit (FAILED_PRECONDITION,
// which neither ends nor extends a probation), and under traffic of large requests the node
// stayed on probation — out of traffic — for good. The probe carries at most the node's limit.
func TestProbeFitsTheNodesItemLimit(t *testing.T) {
	ours := startNodes(t, 1, fakenode.Options{Coeffs: fastCost})
	tei := startFake(t, backend.KindTEI, fakerank.Options{}) // 32 documents per request
	cfg := outlierConfig(ours.Addrs(), fastCost)
	cfg.Nodes.Backends = []backend.Spec{{Kind: backend.KindTEI, Addr: tei.Addr()}}
	cfg.Split.MaxBatchItems = 64
	cfg.Hedge.Enabled = false
	cfg.Outlier.BaseEjection = 100 * time.Millisecond
	cfg.Outlier.MaxEjectionPercent = 50
	p, _ := startProxy(t, cfg)
	var tn *cluster.Node
	for _, n := range p.cluster.Snapshot() {
		if n.Kind() == backend.KindTEI {
			tn = n
		}
	}
	for !tn.Ejected(time.Now()) {
		p.cluster.ReportSlow(tn, time.Now(), 10)
	}
	time.Sleep(150 * time.Millisecond) // ejection over: on probation, out of the plans
	if slices.Contains(p.cluster.Eligible(nil), tn) {
		t.Fatal("node on probation is a planning candidate")
	}
	calls := tei.Calls()
	if _, err := p.Score(context.Background(), makeRequest(100, 1)); err != nil { // two batches of 50
		t.Fatal(err)
	}
	deadline := time.Now().Add(3 * time.Second)
	for !slices.Contains(p.cluster.Eligible(nil), tn) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if !slices.Contains(p.cluster.Eligible(nil), tn) {
		t.Errorf("node still on probation after its probe (%d calls); its requests: %d documents", tei.Calls()-calls, docs(tei.Requests()[calls:]))
	}
	for _, rq := range tei.Requests() {
		if len(rq.Documents) > 32 {
			t.Errorf("TEI got a probe of %d documents, over its limit of 32", len(rq.Documents))
		}
	}
}

func docs(rs []fakerank.Request) []int {
	out := []int{}
	for _, r := range rs {
		out = append(out, len(r.Documents))
	}
	return out
}
