// Package merge is the request pipeline's last stage: it puts the batches' scores back in item
// order, ranks them once, sums usage and timings, and decides the request's outcome.
//
// Rules.
//   - Outcome: a request fails when any batch failed and partial results are not allowed, or
//     when every batch failed; its error is the first failure (or the fail-fast cause), mapped by
//     RequestError. With partial results allowed, the items of failed batches are
//     ITEM_STATUS_FAILED with the batch's error, and the rest are scored; so are the items of a
//     batch cut into pieces of which some failed (dispatch.Result.ItemErrs): FAILED with their
//     piece's error, worded the same.
//   - Ranking: indices of the scored items (status OK, TRUNCATED or unspecified; never TOO_LONG
//     or FAILED), best score first, ties by the lower index, cut to top_n when top_n > 0. Every
//     front reads ScoreResponse.ranking rather than sorting again.
//   - Model is the served model's name as the nodes report it (never the caller's).
//   - Usage sums the batches' usage; timings report the plan time, batches, retries, hedges and
//     the largest queue and compute time of any batch.
//
// Everything here is a pure function, safe for concurrent use.
package merge

import (
	"cmp"
	"context"
	"errors"
	"math"
	"slices"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/dispatch"
	"github.com/relevance-scoring/relevance/proxy/plan"
)

// Input is everything the merge reads.
type Input struct {
	Req   *relevancev1.ScoreRequest
	ReqID string
	Plan  *plan.Plan
	// Results are the batches' outcomes, in the plan's order.
	Results []dispatch.Result
	// FirstErr, when set, is the failure that cancelled the other batches (fail-fast): it, not
	// their cancellations, is the request's reason.
	FirstErr error
	// Partial allows a reply with some batches failed.
	Partial bool
	// Start is when the request arrived (for timings).
	Start time.Time
}

// Merge builds the reply in item order, or the request's error. ctx is the request's context:
// its cancellation or deadline, when that is what ended a batch, is the request's reason.
func Merge(ctx context.Context, in Input) (*relevancev1.ScoreResponse, error) {
	req, results := in.Req, in.Results
	firstErr := in.FirstErr
	failed := 0
	for _, r := range results {
		if r.Err != nil {
			failed++
			if firstErr == nil {
				firstErr = r.Err
			}
		}
	}
	if failed > 0 && (!in.Partial || failed == len(results)) {
		return nil, RequestError(ctx, firstErr)
	}
	out := &relevancev1.ScoreResponse{
		RequestId: in.ReqID,
		Scores:    make([]*relevancev1.ItemScore, len(req.GetItems())),
		Usage:     &relevancev1.Usage{},
	}
	tm := &relevancev1.Timings{PlanSeconds: in.Plan.Duration.Seconds(), Batches: uint32(len(in.Plan.Batches))}
	for bi, r := range results {
		b := in.Plan.Batches[bi]
		tm.Retries += uint32(r.Retries)
		tm.Hedges += uint32(r.Hedges)
		failed := func(i int, msg string) *relevancev1.ItemScore {
			return &relevancev1.ItemScore{Index: uint32(i), Id: req.GetItems()[i].GetId(), Status: relevancev1.ItemStatus_ITEM_STATUS_FAILED, Error: msg}
		}
		if r.Err != nil {
			msg := RequestError(ctx, r.Err).Error()
			for _, i := range b.Items {
				out.Scores[i] = failed(i, msg)
			}
			continue
		}
		for j, s := range r.Resp.GetScores() {
			i := b.Items[j]
			if j < len(r.ItemErrs) && r.ItemErrs[j] != nil {
				out.Scores[i] = failed(i, RequestError(ctx, r.ItemErrs[j]).Error())
				continue
			}
			s.Index = uint32(i)
			s.Id = req.GetItems()[i].GetId()
			out.Scores[i] = s
		}
		if out.Model == "" {
			out.Model = r.Resp.GetModel()
		}
		if u := r.Resp.GetUsage(); u != nil {
			out.Usage.PromptTokens += u.GetPromptTokens()
			out.Usage.PrefixTokens += u.GetPrefixTokens()
			out.Usage.PrefixTokensReused += u.GetPrefixTokensReused()
			out.Usage.ItemTokens += u.GetItemTokens()
			out.Usage.TokensTruncated += u.GetTokensTruncated()
		}
		if st := r.Resp.GetStats(); st != nil {
			tm.QueueSeconds = math.Max(tm.QueueSeconds, st.GetQueueSeconds())
			tm.ComputeSeconds = math.Max(tm.ComputeSeconds, st.GetComputeSeconds())
		}
	}
	out.Ranking = Ranking(out.Scores, int(req.GetTopN()))
	if req.GetOptions().GetReturnTimings() {
		tm.TotalSeconds = time.Since(in.Start).Seconds()
		out.Timings = tm
	}
	return out, nil
}

// Ranked reports whether an item's score takes part in the ranking.
func Ranked(s *relevancev1.ItemScore) bool {
	switch s.GetStatus() {
	case relevancev1.ItemStatus_ITEM_STATUS_OK, relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED, relevancev1.ItemStatus_ITEM_STATUS_UNSPECIFIED:
	default:
		return false
	}
	v := float64(s.GetScore())
	return !math.IsNaN(v) && !math.IsInf(v, 0)
}

// Ranking lists the ranked items by score, best first, equal scores by logit (the float32
// sigmoid is 1 for every logit above ~17 and 0 below ~-104, where the logits still tell items
// apart), then by index; cut to topN when > 0.
func Ranking(scores []*relevancev1.ItemScore, topN int) []uint32 {
	idx := make([]uint32, 0, len(scores))
	for i, s := range scores {
		if Ranked(s) {
			idx = append(idx, uint32(i))
		}
	}
	slices.SortStableFunc(idx, func(a, b uint32) int {
		if c := cmp.Compare(scores[b].GetScore(), scores[a].GetScore()); c != 0 {
			return c
		}
		return cmp.Compare(scores[b].GetLogit(), scores[a].GetLogit())
	})
	if topN > 0 && topN < len(idx) {
		idx = idx[:topN]
	}
	return idx
}

// RequestError maps a batch failure to the request's status: the caller's cancellation or
// deadline when that is what happened, INVALID_ARGUMENT passed through, UNAVAILABLE otherwise.
func RequestError(ctx context.Context, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return status.Error(codes.Canceled, "request cancelled")
	case errors.Is(ctx.Err(), context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded:
		return status.Errorf(codes.DeadlineExceeded, "deadline exceeded: %v", err)
	case status.Code(err) == codes.InvalidArgument:
		return err
	}
	return status.Errorf(codes.Unavailable, "batch failed: %v", err)
}
