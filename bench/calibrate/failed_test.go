package calibrate

import (
	"context"
	"net"
	"strings"
	"testing"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// slowShapesFail is a scorer whose 8-item batches fail (as the slowest shapes do when they pass
// the per-batch timeout); the others take 1 ms per item token.
type slowShapesFail struct {
	relevancev1.UnimplementedScorerServer
}

func (slowShapesFail) ScoreBatch(_ context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	if len(req.GetItems()) >= 8 {
		return nil, status.Error(codes.DeadlineExceeded, "too slow")
	}
	resp := &relevancev1.ScoreBatchResponse{Model: "slow-shapes-fail", Stats: &relevancev1.BatchStats{PrefixTokens: 40}}
	tokens := 0
	for i, it := range req.GetItems() {
		n := len(it.GetText())/4 + 1
		tokens += n
		resp.Scores = append(resp.Scores, &relevancev1.ItemScore{Index: uint32(i), Score: 0.5, Tokens: uint32(n)})
	}
	resp.Stats.ComputeSeconds = 1e-3*float64(tokens) + 2e-3
	return resp, nil
}

// TestRunRefusesANodeMeasureGaveUpOn: Measure stops when too many batches fail ("many mean the
// node is unusable"), but Run used to fit whatever it had whenever that was 8 samples or more,
// and wrote a profile fitted without the shapes that failed (the slow ones) with no error. Only
// an interrupted run (its context cancelled) may keep its partial samples.
func TestRunRefusesANodeMeasureGaveUpOn(t *testing.T) {
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := grpc.NewServer()
	relevancev1.RegisterScorerServer(srv, slowShapesFail{})
	go func() { _ = srv.Serve(lis) }()
	defer srv.Stop()

	res, err := Run(context.Background(), lis.Addr().String(), 1, Options{Seed: 1})
	if err == nil {
		t.Fatalf("Run wrote a profile from %d samples of a node whose 8-item batches all failed: %+v", len(res.Samples), res.Profile.Coeffs)
	}
	if !strings.Contains(err.Error(), "failed") {
		t.Errorf("error %v: want it to say batches failed", err)
	}
}
