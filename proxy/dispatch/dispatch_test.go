package dispatch

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/plan"
	"github.com/relevance-scoring/relevance/proxy/request"
)

func TestRetryBudget(t *testing.T) {
	b := newRetryBudget(0.1, 2)
	got := []bool{b.take(), b.take(), b.take()}
	if got[0] != true || got[1] != true || got[2] != false {
		t.Fatalf("burst of 2: takes %v", got)
	}
	for range 9 {
		b.deposit()
	}
	if b.take() {
		t.Fatal("9 batches at 10% earned a whole retry")
	}
	b.deposit()
	if !b.take() {
		t.Fatal("10 batches at 10% did not earn a retry")
	}
	for range 100 {
		b.deposit()
	}
	if b.take(); !b.take() || b.take() {
		t.Fatal("bucket not capped at its burst of 2")
	}
}

func TestClassify(t *testing.T) {
	live := context.Background()
	cancelled, cancel := context.WithCancel(context.Background())
	cancel()
	dl := status.Error(codes.DeadlineExceeded, "deadline")
	tests := []struct {
		name     string
		ctx      context.Context
		err      error
		el       time.Duration
		expected float64
		want     string // "ok", "excluded" or "failure"
	}{
		{"success", live, nil, time.Millisecond, 0.001, "ok"},
		{"unavailable", live, status.Error(codes.Unavailable, "x"), time.Millisecond, 0.001, "failure"},
		{"internal", live, status.Error(codes.Internal, "x"), time.Millisecond, 0.001, "failure"},
		{"invalid argument", live, status.Error(codes.InvalidArgument, "x"), time.Millisecond, 0.001, "excluded"},
		{"node shedding load", live, status.Error(codes.ResourceExhausted, "queue full"), time.Millisecond, 0.001, "excluded"},
		{"canceled code", live, status.Error(codes.Canceled, "x"), time.Millisecond, 0.001, "excluded"},
		{"caller cancelled", cancelled, status.Error(codes.Unavailable, "x"), time.Millisecond, 0.001, "excluded"},
		{"deadline too short for the work", live, dl, 20 * time.Millisecond, 0.1, "excluded"},
		{"deadline on a node far past its expected time", live, dl, 500 * time.Millisecond, 0.01, "failure"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := classify(tt.ctx, tt.err, tt.el, tt.expected)
			got := "failure"
			switch {
			case v == nil:
				got = "ok"
			case errors.Is(v, cluster.ErrExcluded):
				got = "excluded"
			}
			if got != tt.want {
				t.Errorf("classify = %s (%v), want %s", got, v, tt.want)
			}
		})
	}
}

func TestCheckReplyRejectsNonFiniteScores(t *testing.T) {
	for _, v := range []float32{float32(math.NaN()), float32(math.Inf(1)), float32(math.Inf(-1))} {
		resp := &relevancev1.ScoreBatchResponse{Scores: []*relevancev1.ItemScore{{Index: 0, Score: 0.5}, {Index: 1, Score: v}}}
		if err := checkReply(resp, 2); status.Code(err) != codes.Internal {
			t.Errorf("score %v: checkReply = %v, want Internal (a broken node's reply must not be merged)", v, err)
		}
	}
}

func TestRetryableCanceledByConnection(t *testing.T) {
	// The caller is alive but the call was cancelled under it (the node's connection closed as
	// DNS removed it): another node can take the batch.
	if !retryable(context.Background(), status.Error(codes.Canceled, "grpc: the client connection is closing")) {
		t.Error("Canceled with a live caller: not retried")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if retryable(ctx, status.Error(codes.Canceled, "context canceled")) {
		t.Error("Canceled by the caller: retried")
	}
}

// TestNodeFieldErrorsNameTheRequestItem: a node's complaint about the batch's third item names
// that item's index in the request.
func TestNodeFieldErrorsNameTheRequestItem(t *testing.T) {
	items := []int{4, 9, 17}
	err := requestFields(request.FieldError("items[2].text", "too long for this node"), items)
	if field, problem, ok := request.Violation(err); !ok || field != "items[17].text" || problem != "too long for this node" {
		t.Errorf("remapped: %q %q %v (%v), want items[17].text", field, problem, ok, err)
	}
	if status.Code(err) != codes.InvalidArgument {
		t.Errorf("code %v, want InvalidArgument", status.Code(err))
	}
	for _, e := range []error{
		request.FieldError("query", "bad"),
		request.FieldError("items[7].text", "out of the batch"),
		status.Error(codes.Unavailable, "x"),
	} {
		if got := requestFields(e, items); got != e {
			t.Errorf("%v rewritten to %v", e, got)
		}
	}
}

// TestOnlyTrustedProjectionsFeedAccuracy: the measured error that admission's margin reads comes
// from batches whose node model had learned enough; the first batches, priced by the prior, are
// left out.
func TestOnlyTrustedProjectionsFeedAccuracy(t *testing.T) {
	d := &Dispatcher{cfg: Config{TrustSamples: 10}, acc: &plan.Accuracy{}}
	for range 32 {
		d.record(&plan.Lease{Finish: 0.1, Samples: 3}, 400*time.Millisecond) // 4× off: the prior
	}
	if _, n := d.acc.Quantile(0.9); n != 0 {
		t.Fatalf("%d untrusted projections recorded", n)
	}
	for range 32 {
		d.record(&plan.Lease{Finish: 0.1, Samples: 10}, 110*time.Millisecond)
	}
	if q, n := d.acc.Quantile(0.9); n != 32 || math.Abs(q-1.1) > 1e-9 {
		t.Errorf("p90 %v over %d, want 1.1 over 32", q, n)
	}
}

// TestBatchCarriesTheWorkProjectedAheadOfIt: the request a node gets is the batch's request with
// the lease's projected backlog (Lease.Start) as queued_ahead_seconds, every other field as
// planned; the shared request is left as it was (hedges and retries send it too, concurrently).
func TestBatchCarriesTheWorkProjectedAheadOfIt(t *testing.T) {
	orig := &relevancev1.ScoreBatchRequest{
		RequestId: "r", BatchIndex: 3, Query: "q", Instruction: "i",
		Items:                []*relevancev1.Item{{Id: "a", Text: "x"}, {Id: "b", Text: "y"}},
		Options:              &relevancev1.ScoreOptions{MaxTokensPerItem: 7},
		EstimatedCostSeconds: 0.25,
	}
	before := proto.Clone(orig)
	for _, tc := range []struct{ ahead, want float64 }{{1.5, 1.5}, {0, 0}, {-2, 0}, {math.NaN(), 0}} {
		got := queuedAhead(orig, tc.ahead)
		if got.GetQueuedAheadSeconds() != tc.want {
			t.Errorf("ahead %v: queued_ahead_seconds %v, want %v", tc.ahead, got.GetQueuedAheadSeconds(), tc.want)
		}
		want := proto.Clone(orig).(*relevancev1.ScoreBatchRequest)
		want.QueuedAheadSeconds = tc.want
		if !proto.Equal(got, want) {
			t.Errorf("ahead %v: sent %v, want the batch's request %v", tc.ahead, got, want)
		}
	}
	if !proto.Equal(orig, before) {
		t.Errorf("the batch's own request changed: %v, was %v", orig, before)
	}
}

// TestRefusedBatchFeedsTheDeadlineToAccuracy: a node refuses a batch the moment it reaches it
// and finds it cannot finish before the deadline, so the refusal comes early; the projections'
// error window must get the deadline as the batch's latency (a lower bound), not the refusal's
// time, which would tell admission that the plan was early for a batch it was late for.
func TestRefusedBatchFeedsTheDeadlineToAccuracy(t *testing.T) {
	d := &Dispatcher{cfg: Config{TrustSamples: 10, SlowMin: 50 * time.Millisecond}, acc: &plan.Accuracy{}}
	start := time.Now()
	ctx, cancel := context.WithDeadline(context.Background(), start.Add(500*time.Millisecond))
	defer cancel()
	refused := status.Error(codes.DeadlineExceeded, "batch cannot finish before its deadline: estimated 0.074s of compute, 0.074s left")
	l := &plan.Lease{Finish: 0.45, Samples: 10}
	for range 16 {
		d.outlier(ctx, l, refused, false, 427*time.Millisecond, &callMarks{}, start.Add(427*time.Millisecond), start)
	}
	q, n := d.acc.Quantile(0.5)
	if n != 16 || q < 0.5/0.45-1e-3 {
		t.Errorf("median recorded ratio %v over %d refusals, want ≥ %.3f (the deadline over the projection) over 16", q, n, 0.5/0.45)
	}
}

// TestOversizedMessageIsNoShed: gRPC's own RESOURCE_EXHAUSTED for a message over the size limit
// is about the batch, not the node's load: it does not hold the node busy as a shed would.
func TestOversizedMessageIsNoShed(t *testing.T) {
	if !tooLarge(status.Error(codes.ResourceExhausted, "grpc: received message larger than max (5242880 vs. 4194304)")) {
		t.Error("a received message over the limit taken for a shed")
	}
	if !tooLarge(status.Error(codes.ResourceExhausted, "grpc: trying to send message larger than max (9 vs. 4)")) {
		t.Error("a sent message over the limit taken for a shed")
	}
	if tooLarge(status.Error(codes.ResourceExhausted, "queue full: 256 batches waiting (max_queue_batches)")) {
		t.Error("a full queue not taken for a shed")
	}
}

// TestJoinRepliesOfACutBatch: the pieces of a batch cut to a node's item limit answer as the
// batch would: scores indexed in the batch in order, usage summed, the model they share; pieces
// of two models are not mixed.
func TestJoinRepliesOfACutBatch(t *testing.T) {
	got, itemErrs, err := join(answered("f", 0.1, 0.2), answered("f", 0.3), answered("f", 0.4, 0.5))
	if err != nil {
		t.Fatal(err)
	}
	if itemErrs != nil {
		t.Errorf("item errors %v with every piece answered", itemErrs)
	}
	if err := checkReply(got, 5); err != nil {
		t.Fatal(err)
	}
	for j, s := range got.GetScores() {
		if want := float32(j+1) / 10; s.GetScore() != want {
			t.Errorf("scores[%d] = %v, want %v", j, s.GetScore(), want)
		}
	}
	if got.GetUsage().GetPromptTokens() != 30 || got.GetUsage().GetItemTokens() != 12 || got.GetModel() != "m" ||
		got.GetModelFingerprint() != "f" || got.GetStats().GetComputeSeconds() != 2 {
		t.Errorf("joined reply %v", got)
	}
	if _, _, err := join(answered("f", 0.1), answered("g", 0.2)); status.Code(err) != codes.Unavailable {
		t.Errorf("pieces of two models joined: err %v, want Unavailable", err)
	}
	if got, _, _ := join(answered("f", 0.1), answered("", 0.2)); got.GetModelFingerprint() != "" {
		t.Errorf("a piece without a fingerprint joined under %q", got.GetModelFingerprint())
	}
}

// TestJoinRepliesWithAFailedPiece: with partial results, a failed piece of a cut batch stands as
// FAILED scores of its items, each with the piece's error in itemErrs, and adds nothing else to
// the reply: no usage, and no fingerprint, so that the answered pieces' scores are still the
// served model's (and whatever reply the failed piece holds, such as another model's refused one,
// is not read). A piece cut again passes on its own failed items.
func TestJoinRepliesWithAFailedPiece(t *testing.T) {
	boom := status.Error(codes.Unavailable, "node x: boom")
	failed := answered("g", 0.9, 0.9) // another model's reply, refused (codes.Aborted in call)
	failed.Err = boom
	again := answered("f", 0.5, 0.6)
	again.Resp.Scores[1] = &relevancev1.ItemScore{Index: 1, Status: relevancev1.ItemStatus_ITEM_STATUS_FAILED}
	again.ItemErrs = []error{nil, boom}
	got, itemErrs, err := join(answered("f", 0.1, 0.2), failed, again)
	if err != nil {
		t.Fatal(err)
	}
	if err := checkReply(got, 6); err != nil {
		t.Fatal(err)
	}
	if want := []error{nil, nil, boom, boom, nil, boom}; !slices.Equal(itemErrs, want) {
		t.Fatalf("item errors %v, want %v", itemErrs, want)
	}
	for j, s := range got.GetScores() {
		if f := s.GetStatus() == relevancev1.ItemStatus_ITEM_STATUS_FAILED; f != (itemErrs[j] != nil) {
			t.Errorf("scores[%d] status %s with item error %v", j, s.GetStatus(), itemErrs[j])
		}
	}
	if got.GetScores()[2].GetError() != boom.Error() {
		t.Errorf("failed piece's item error %q, want %q", got.GetScores()[2].GetError(), boom.Error())
	}
	if got.GetModelFingerprint() != "f" || got.GetUsage().GetPromptTokens() != 20 || got.GetStats().GetComputeSeconds() != 2 {
		t.Errorf("joined reply %v: want fingerprint f and the usage and stats of the two answered pieces", got)
	}
}

// answered is a piece's outcome: a reply of model m (fingerprint fp) with these scores.
func answered(fp string, scores ...float32) Result {
	r := &relevancev1.ScoreBatchResponse{Model: "m", ModelFingerprint: fp, Usage: &relevancev1.Usage{PromptTokens: 10, ItemTokens: 4},
		Stats: &relevancev1.BatchStats{ComputeSeconds: float64(len(scores))}}
	for j, s := range scores {
		r.Scores = append(r.Scores, &relevancev1.ItemScore{Index: uint32(j), Score: s})
	}
	return Result{Resp: r}
}

// join joins the outcomes of pieces of as many items as their replies hold.
func join(rs ...Result) (*relevancev1.ScoreBatchResponse, []error, error) {
	pieces := make([]*plan.Batch, len(rs))
	for i, r := range rs {
		pieces[i] = &plan.Batch{Items: make([]int, len(r.Resp.GetScores()))}
	}
	return joinReplies(pieces, rs)
}
