package merge

import (
	"context"
	"errors"
	"math"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/dispatch"
	"github.com/relevance-scoring/relevance/proxy/plan"
)

func scores(vals ...float32) []*relevancev1.ItemScore {
	out := make([]*relevancev1.ItemScore, len(vals))
	for i, v := range vals {
		out[i] = &relevancev1.ItemScore{Index: uint32(i), Score: v, Status: relevancev1.ItemStatus_ITEM_STATUS_OK}
	}
	return out
}

// TestRanking: best first, ties by the lower index, only scored items, cut to top_n.
func TestRanking(t *testing.T) {
	s := scores(0.2, 0.9, 0.5, 0.9, 0.1, float32(math.NaN()))
	s[4].Status = relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG
	s[2].Status = relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED
	s[0].Status = relevancev1.ItemStatus_ITEM_STATUS_FAILED
	tests := []struct {
		name string
		topN int
		want []uint32
	}{
		{"all", 0, []uint32{1, 3, 2}},
		{"top 2", 2, []uint32{1, 3}},
		{"top beyond", 10, []uint32{1, 3, 2}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, Ranking(s, tt.topN)); diff != "" {
			t.Errorf("%s: ranking (-want +got):\n%s", tt.name, diff)
		}
	}
}

// TestRankingOfSaturatedScoresFollowsTheLogits: the float32 sigmoid is exactly 1 for every logit
// above ~17, so scores tie where the logits do not; the ranking follows the logits there (logits
// 18, 25, 2: item 1 first, not item 0 by its index), and equal scores and logits keep index order.
func TestRankingOfSaturatedScoresFollowsTheLogits(t *testing.T) {
	s := scores(1, 1, 0.88, 1)
	for i, l := range []float32{18, 25, 2, 18} {
		s[i].Logit = l
	}
	if diff := cmp.Diff([]uint32{1, 0, 3, 2}, Ranking(s, 0)); diff != "" {
		t.Errorf("ranking (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint32{1}, Ranking(s, 1)); diff != "" {
		t.Errorf("top 1 (-want +got):\n%s", diff)
	}
}

func twoBatchPlan() (*relevancev1.ScoreRequest, *plan.Plan) {
	req := &relevancev1.ScoreRequest{Query: "q", TopN: 3, Items: []*relevancev1.Item{{Id: "a"}, {Id: "b"}, {Id: "c"}, {Id: "d"}}}
	p := &plan.Plan{Batches: []*plan.Batch{{Index: 0, Items: []int{1, 3}}, {Index: 1, Items: []int{0, 2}}}}
	return req, p
}

func reply(model string, vals ...float32) *relevancev1.ScoreBatchResponse {
	return &relevancev1.ScoreBatchResponse{Model: model, Scores: scores(vals...),
		Usage: &relevancev1.Usage{PromptTokens: 10, PrefixTokens: 4, ItemTokens: 6},
		Stats: &relevancev1.BatchStats{ComputeSeconds: 0.1 * float64(len(vals))}}
}

// TestMergePutsScoresInItemOrder: batch j's scores land on the request items the batch carried,
// with their ids; usage adds up; the ranking is computed once, here.
func TestMergePutsScoresInItemOrder(t *testing.T) {
	req, p := twoBatchPlan()
	res := []dispatch.Result{{Resp: reply("m", 0.8, 0.1)}, {Resp: reply("m", 0.3, 0.9), Retries: 1}}
	out, err := Merge(context.Background(), Input{Req: req, ReqID: "r", Plan: p, Results: res, Start: time.Now()})
	if err != nil {
		t.Fatal(err)
	}
	var got []float32
	var ids []string
	for i, s := range out.GetScores() {
		if int(s.GetIndex()) != i {
			t.Errorf("scores[%d].index = %d", i, s.GetIndex())
		}
		got = append(got, s.GetScore())
		ids = append(ids, s.GetId())
	}
	if diff := cmp.Diff([]float32{0.3, 0.8, 0.9, 0.1}, got); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"a", "b", "c", "d"}, ids); diff != "" {
		t.Errorf("ids (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint32{2, 1, 0}, out.GetRanking()); diff != "" {
		t.Errorf("ranking (-want +got):\n%s", diff)
	}
	if u := out.GetUsage(); u.GetPromptTokens() != 20 || u.GetItemTokens() != 12 {
		t.Errorf("usage %+v, want the batches' sum", u)
	}
	if out.GetModel() != "m" || out.GetRequestId() != "r" {
		t.Errorf("model %q, request id %q", out.GetModel(), out.GetRequestId())
	}
}

// TestMergeFailures: a failed batch fails the request unless partial results are allowed; then
// its items are FAILED with the reason and left out of the ranking. When every batch failed the
// request fails anyway, and a fail-fast cause wins over the cancellations it caused.
func TestMergeFailures(t *testing.T) {
	req, p := twoBatchPlan()
	boom := status.Error(codes.Unavailable, "node x: boom")
	res := []dispatch.Result{{Resp: reply("m", 0.8, 0.1)}, {Err: boom}}
	if _, err := Merge(context.Background(), Input{Req: req, Plan: p, Results: res}); status.Code(err) != codes.Unavailable {
		t.Errorf("fail mode: %v, want UNAVAILABLE", err)
	}
	out, err := Merge(context.Background(), Input{Req: req, Plan: p, Results: res, Partial: true})
	if err != nil {
		t.Fatalf("partial: %v", err)
	}
	for _, i := range []int{0, 2} {
		if s := out.GetScores()[i]; s.GetStatus() != relevancev1.ItemStatus_ITEM_STATUS_FAILED || s.GetError() == "" {
			t.Errorf("item %d of the failed batch: %+v", i, s)
		}
	}
	if diff := cmp.Diff([]uint32{1, 3}, out.GetRanking()); diff != "" {
		t.Errorf("partial ranking (-want +got):\n%s", diff)
	}
	all := []dispatch.Result{{Err: status.Error(codes.Canceled, "cancelled")}, {Err: status.Error(codes.Canceled, "cancelled")}}
	cause := status.Error(codes.InvalidArgument, "items[0].text: bad")
	if _, err := Merge(context.Background(), Input{Req: req, Plan: p, Results: all, FirstErr: cause, Partial: true}); status.Code(err) != codes.InvalidArgument {
		t.Errorf("all failed with a fail-fast cause: %v, want the cause", err)
	}
}

// TestMergeFailedPieces: a batch answered with some items failed (a cut batch whose piece failed:
// dispatch.Result.ItemErrs) keeps its other items' scores; the failed ones are FAILED with the
// piece's error worded as a failed batch's, and left out of the ranking.
func TestMergeFailedPieces(t *testing.T) {
	req, p := twoBatchPlan()
	boom := status.Error(codes.Unavailable, "node x: boom")
	cut := reply("m", 0.8, 0)
	cut.Scores[1] = &relevancev1.ItemScore{Index: 1, Status: relevancev1.ItemStatus_ITEM_STATUS_FAILED, Error: boom.Error()}
	res := []dispatch.Result{{Resp: cut, ItemErrs: []error{nil, boom}}, {Resp: reply("m", 0.3, 0.9)}}
	out, err := Merge(context.Background(), Input{Req: req, Plan: p, Results: res, Partial: true})
	if err != nil {
		t.Fatal(err)
	}
	if s := out.GetScores()[3]; s.GetStatus() != relevancev1.ItemStatus_ITEM_STATUS_FAILED || s.GetId() != "d" || s.GetIndex() != 3 ||
		s.GetError() != RequestError(context.Background(), boom).Error() {
		t.Errorf("item 3, of the failed piece: %+v", s)
	}
	if s := out.GetScores()[1]; s.GetStatus() != relevancev1.ItemStatus_ITEM_STATUS_OK || s.GetScore() != 0.8 || s.GetId() != "b" {
		t.Errorf("item 1, of the answered piece: %+v", s)
	}
	if diff := cmp.Diff([]uint32{2, 1, 0}, out.GetRanking()); diff != "" {
		t.Errorf("ranking (-want +got):\n%s", diff)
	}
}

func TestRequestError(t *testing.T) {
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	expired, cancel2 := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
	defer cancel2()
	other := errors.New("x")
	tests := []struct {
		name string
		ctx  context.Context
		err  error
		want codes.Code
	}{
		{"caller cancelled", cancelled, other, codes.Canceled},
		{"caller deadline", expired, other, codes.DeadlineExceeded},
		{"node deadline", context.Background(), status.Error(codes.DeadlineExceeded, "x"), codes.DeadlineExceeded},
		{"bad input passes through", context.Background(), status.Error(codes.InvalidArgument, "x"), codes.InvalidArgument},
		{"a node's own limit is the server's, not the caller's", context.Background(), status.Error(codes.FailedPrecondition, "node x: over its limit of 4 items"), codes.Unavailable},
		{"anything else", context.Background(), status.Error(codes.Internal, "x"), codes.Unavailable},
	}
	for _, tt := range tests {
		if got := status.Code(RequestError(tt.ctx, tt.err)); got != tt.want {
			t.Errorf("%s: %v, want %v", tt.name, got, tt.want)
		}
	}
}
