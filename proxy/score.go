package proxy

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"sync"
	"time"
	"unicode/utf8"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/split"
)

// Admission rejection reasons (relevance_proxy_rejected_total{reason}).
const (
	reasonOverload = "overload"
	reasonDeadline = "deadline"
)

// batchPlan is one batch on its way to a node.
type batchPlan struct {
	index  int
	items  []int // request indices
	req    *relevancev1.ScoreBatchRequest
	prefix int
	feats  costmodel.Features // proxy-side features (prefix not cached)
}

type batchResult struct {
	resp    *relevancev1.ScoreBatchResponse
	err     error
	retries int
	hedges  int
}

// Score scores every item of req against its query across the nodes. Errors are gRPC status
// errors: INVALID_ARGUMENT (the message names the field), RESOURCE_EXHAUSTED with RetryInfo
// (admission), UNAVAILABLE (no node can serve, or a batch failed), DEADLINE_EXCEEDED, CANCELED.
func (p *Proxy) Score(ctx context.Context, req *relevancev1.ScoreRequest) (resp *relevancev1.ScoreResponse, err error) {
	start := time.Now()
	defer func() {
		p.m.requestDuration.WithLabelValues(status.Code(err).String()).Observe(time.Since(start).Seconds())
	}()
	if err := p.validate(req); err != nil {
		return nil, err
	}
	if p.closed.Load() {
		return nil, grpcError(codes.Unavailable, "proxy is shutting down")
	}
	// The budget is timeout_ms when set, else the caller's own deadline (a gRPC client's), else
	// the SLO; an earlier caller deadline always wins over timeout_ms.
	var cancel context.CancelFunc = func() {}
	if req.GetTimeoutMs() > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.GetTimeoutMs())*time.Millisecond)
	} else if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, p.cfg.SLO)
	}
	defer cancel()
	reqID := req.GetRequestId()
	if reqID == "" {
		reqID = newRequestID()
	}

	// Plan: token counts, split, admission.
	prefix := p.tokens.Prefix(req.GetInstruction(), req.GetQuery())
	toks := make([]int, len(req.GetItems()))
	for i, it := range req.GetItems() {
		toks[i] = p.tokens.Item(it.GetText())
	}
	now := time.Now()
	cands := p.eligible(nil)
	if len(cands) == 0 {
		cands = p.fallback(nil)
	}
	if len(cands) == 0 {
		return nil, grpcError(codes.Unavailable, "no healthy scorer node")
	}
	ref := meanCoeffs(cands)
	in := split.Input{
		PrefixTokens:       prefix,
		ItemTokens:         toks,
		Coeffs:             ref,
		Nodes:              make([]split.Node, len(cands)),
		MaxBatchItems:      p.cfg.Split.MaxBatchItems,
		TargetBatchSeconds: p.cfg.Split.TargetBatchSeconds,
	}
	for i, n := range cands {
		in.Nodes[i] = split.Node{Backlog: n.load(now), Scale: n.scale(ref)}
	}
	batches := p.splitter.Split(in)
	p.m.batchesPerReq.Observe(float64(len(batches)))
	p.m.imbalance.Observe(split.Imbalance(batches))
	if err := p.admit(ctx, in, batches); err != nil {
		return nil, err
	}
	plans := make([]*batchPlan, len(batches))
	for bi, b := range batches {
		br := &relevancev1.ScoreBatchRequest{
			RequestId:            reqID,
			BatchIndex:           uint32(bi),
			Query:                req.GetQuery(),
			Instruction:          req.GetInstruction(),
			Items:                make([]*relevancev1.Item, len(b.Items)),
			Options:              req.GetOptions(),
			EstimatedCostSeconds: b.Cost,
		}
		bt := make([]int, len(b.Items))
		for j, i := range b.Items {
			br.Items[j] = req.GetItems()[i]
			bt[j] = toks[i]
		}
		plans[bi] = &batchPlan{index: bi, items: b.Items, req: br, prefix: prefix, feats: costmodel.BatchFeatures(prefix, bt, false)}
	}
	planDur := time.Since(start)

	// Lease the first node of every batch here, in the plan's order (earliest planned start
	// first) and charging each pick before the next, so that routing follows the split's plan.
	leases := make([]*lease, len(plans))
	for bi, pl := range plans {
		leases[bi] = p.lease(nil, pl)
	}
	// In "fail" mode the first batch that fails for good decides the request: the others are
	// cancelled at once (their calls return and count for no breaker) instead of holding the
	// reply, and their nodes, until they finish or the deadline passes.
	failFast := p.cfg.OnPartialFailure != PartialPartial && !req.GetOptions().GetAllowPartial()
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	var failOnce sync.Once
	var firstErr error // set once, before stop; read after wg.Wait
	results := make([]batchResult, len(plans))
	var wg sync.WaitGroup
	for bi, pl := range plans {
		wg.Go(func() {
			r := p.runBatch(bctx, pl, leases[bi])
			results[bi] = r
			if r.err != nil && failFast {
				failOnce.Do(func() { firstErr = r.err; stop() })
			}
		})
	}
	wg.Wait()
	return p.merge(ctx, req, reqID, plans, results, firstErr, start, planDur)
}

// validate checks req; errors are INVALID_ARGUMENT naming the field.
func (p *Proxy) validate(req *relevancev1.ScoreRequest) error {
	bad := func(format string, args ...any) error { return grpcError(codes.InvalidArgument, format, args...) }
	lim := p.cfg.Limits
	switch {
	case req == nil:
		return bad("request: missing")
	case req.GetQuery() == "":
		return bad("query: empty")
	case len(req.GetQuery()) > lim.MaxQueryBytes:
		return bad("query: %d bytes, limit %d", len(req.GetQuery()), lim.MaxQueryBytes)
	case !utf8.ValidString(req.GetQuery()):
		return bad("query: invalid UTF-8")
	case len(req.GetInstruction()) > lim.MaxQueryBytes:
		return bad("instruction: %d bytes, limit %d", len(req.GetInstruction()), lim.MaxQueryBytes)
	case !utf8.ValidString(req.GetInstruction()):
		return bad("instruction: invalid UTF-8")
	case len(req.GetItems()) == 0:
		return bad("items: empty")
	case len(req.GetItems()) > lim.MaxItems:
		return bad("items: %d items, limit %d", len(req.GetItems()), lim.MaxItems)
	case !utf8.ValidString(req.GetRequestId()):
		return bad("request_id: invalid UTF-8")
	}
	for i, it := range req.GetItems() {
		switch {
		case it == nil:
			return bad("items[%d]: missing", i)
		case len(it.GetText()) > lim.MaxItemBytes:
			return bad("items[%d].text: %d bytes, limit %d", i, len(it.GetText()), lim.MaxItemBytes)
		case !utf8.ValidString(it.GetText()):
			return bad("items[%d].text: invalid UTF-8", i)
		case !utf8.ValidString(it.GetId()):
			return bad("items[%d].id: invalid UTF-8", i)
		}
	}
	return nil
}

// admit rejects a request whose projected completion misses its deadline: the batches are laid
// on the nodes as the splitter planned (each to the node that finishes it first, counting
// backlog and speed). Predictions are trusted only once every candidate has learned from
// Admission.MinSamples batches.
func (p *Proxy) admit(ctx context.Context, in split.Input, batches []split.Batch) error {
	if p.cfg.Admission.Disabled || len(batches) == 0 {
		return nil
	}
	for _, n := range p.eligible(nil) {
		if n.samples.Load() < int64(p.cfg.Admission.MinSamples) {
			return nil
		}
	}
	dl, _ := ctx.Deadline()
	allowed := p.cfg.Admission.Headroom * time.Until(dl).Seconds()
	busy := makespan(in.Nodes, batches, true)
	if busy <= allowed {
		return nil
	}
	reason, retry := reasonOverload, busy-allowed
	if idle := makespan(in.Nodes, batches, false); idle > allowed {
		reason, retry = reasonDeadline, idle
	}
	p.m.rejected.WithLabelValues(reason).Inc()
	st := status.Newf(codes.ResourceExhausted, "admission: projected completion %.0fms exceeds the %.0fms budget (%s)", busy*1e3, allowed*1e3, reason)
	retryDelay := time.Duration(math.Max(retry, 0.01) * float64(time.Second))
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(retryDelay)}); err == nil {
		st = d
	}
	return st.Err()
}

// makespan lays batches (largest first) on nodes, each where it finishes first.
func makespan(nodes []split.Node, batches []split.Batch, withBacklog bool) float64 {
	free := make([]float64, len(nodes))
	if withBacklog {
		for i, n := range nodes {
			free[i] = math.Max(0, n.Backlog)
		}
	}
	costs := make([]float64, len(batches))
	for i, b := range batches {
		costs[i] = b.Cost
	}
	slices.SortFunc(costs, func(a, b float64) int { return cmp.Compare(b, a) })
	var end float64
	for _, c := range costs {
		best, bestEnd := 0, math.Inf(1)
		for i, n := range nodes {
			s := n.Scale
			if s <= 0 {
				s = 1
			}
			if e := free[i] + s*c; e < bestEnd {
				best, bestEnd = i, e
			}
		}
		free[best] = bestEnd
		end = math.Max(end, bestEnd)
	}
	return end
}

// runBatch sends one batch (first to the node leased at planning time, when there is one),
// retrying once on another node under the retry budget.
func (p *Proxy) runBatch(ctx context.Context, pl *batchPlan, first *lease) batchResult {
	p.budget.deposit()
	var tried []*node
	var res batchResult
	for attempt := range 2 {
		if attempt == 1 {
			if p.cfg.Retry.Disabled || !retryable(ctx, res.err) {
				break
			}
			dl, _ := ctx.Deadline()
			if time.Until(dl).Seconds() < meanCoeffs(p.eligible(tried)).Seconds(pl.feats) {
				break // not enough time left for the work itself
			}
		}
		l := first
		first = nil
		if l == nil {
			l = p.lease(tried, pl)
		}
		if l == nil {
			if res.err == nil {
				res.err = grpcError(codes.Unavailable, "batch %d: no healthy scorer node to take it", pl.index)
			}
			break
		}
		if attempt == 1 {
			// The budget is spent only on a retry that really goes out.
			if !p.budget.take() {
				l.release()
				break
			}
			res.retries++
			p.m.retries.Inc()
		}
		tried = append(tried, l.n)
		resp, hedged, err := p.attempt(ctx, pl, l, &tried)
		res.resp, res.err = resp, err
		res.hedges += hedged
		if err == nil {
			break
		}
	}
	return res
}

func retryable(ctx context.Context, err error) bool {
	if ctx.Err() != nil {
		return false
	}
	// Canceled with the caller still waiting is not the caller's doing (e.g. the node's
	// connection closed as it left the membership): another node may take the batch.
	switch status.Code(err) {
	case codes.InvalidArgument, codes.OK:
		return false
	}
	return true
}

// attempt runs the batch on its lease and, with hedging on, on a second node if the first
// straggles; the first answer wins and the other call is cancelled. It returns only after every
// call it started has returned, so nothing outlives the request.
func (p *Proxy) attempt(ctx context.Context, pl *batchPlan, l *lease, tried *[]*node) (*relevancev1.ScoreBatchResponse, int, error) {
	delay, ok := p.hedgeDelay(ctx, l.expected)
	if !ok {
		resp, err := p.call(ctx, l, pl)
		return resp, 0, err
	}

	type result struct {
		resp  *relevancev1.ScoreBatchResponse
		err   error
		hedge bool
	}
	ch := make(chan result, 2)
	c1, cancel1 := context.WithCancel(ctx)
	defer cancel1()
	go func() {
		r, e := p.call(c1, l, pl)
		ch <- result{r, e, false}
	}()
	timer := time.NewTimer(delay)
	defer timer.Stop()
	select {
	case r := <-ch:
		return r.resp, 0, r.err
	case <-timer.C:
	}
	l2 := p.leaseIdle(*tried, pl, l.expected)
	if l2 == nil {
		r := <-ch
		return r.resp, 0, r.err
	}
	*tried = append(*tried, l2.n)
	p.m.hedges.Inc()
	c2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	go func() {
		r, e := p.call(c2, l2, pl)
		ch <- result{r, e, true}
	}()
	win := <-ch
	if win.err == nil {
		// Cancel the loser and wait for it (a cancelled RPC returns at once).
		cancel1()
		cancel2()
		<-ch
	} else if second := <-ch; second.err == nil {
		win = second
	}
	if win.err == nil && win.hedge {
		p.m.hedgeWins.Inc()
	}
	return win.resp, 1, win.err
}

// hedgeDelay is how long to wait before hedging a batch expected to finish in expected seconds:
// the configured quantile of recent (latency ÷ expected) ratios times expected.
func (p *Proxy) hedgeDelay(ctx context.Context, expected float64) (time.Duration, bool) {
	if !p.cfg.Hedge.Enabled {
		return 0, false
	}
	q, n := p.hedge.quantile()
	if n < p.cfg.Hedge.MinSamples {
		return 0, false
	}
	d := max(time.Duration(q*expected*float64(time.Second)), p.cfg.Hedge.MinDelay)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= d {
		return 0, false
	}
	return d, true
}

// call runs one ScoreBatch on the lease's node, then releases the lease's charge, reports the
// outcome to the breaker, and learns from a success.
func (p *Proxy) call(ctx context.Context, l *lease, pl *batchPlan) (*relevancev1.ScoreBatchResponse, error) {
	n := l.n
	t0 := time.Now()
	resp, err := n.client.ScoreBatch(ctx, pl.req)
	el := time.Since(t0)
	n.settle(time.Now(), l.predicted)
	if err == nil {
		err = checkReply(resp, len(pl.req.GetItems()))
	}
	verdict := classify(ctx, err, el, l.expected)
	if l.done != nil {
		l.done(verdict)
	}
	now := time.Now()
	switch {
	case err == nil:
		n.batches.Add(1)
		n.observe(resp, now)
		p.m.batchDuration.Observe(el.Seconds())
		if l.expected > 0 {
			p.hedge.add(el.Seconds() / l.expected)
		}
		pred := l.predicted
		if resp.GetStats().GetPrefixCached() {
			pred -= l.coeffs.Seconds(costmodel.PrefixFeatures(pl.prefix))
		}
		if cs := resp.GetStats().GetComputeSeconds(); cs > 0 && pred > 0 {
			p.m.estimateRatio.Observe(cs / pred)
		}
	case !errors.Is(verdict, errExcluded):
		n.errors.Add(1)
		n.lastFailure.Store(now.UnixNano())
		err = fmt.Errorf("node %s: %w", n.addr, err)
	}
	if n.calls.Add(-1) == 0 && n.removed.Load() {
		n.closeIdle()
	}
	return resp, err
}

// checkReply rejects a reply that does not hold one score per item in batch order: merging it
// would put scores on the wrong items.
func checkReply(resp *relevancev1.ScoreBatchResponse, items int) error {
	if len(resp.GetScores()) != items {
		return grpcError(codes.Internal, "reply has %d scores for %d items", len(resp.GetScores()), items)
	}
	for j, s := range resp.GetScores() {
		if s == nil || s.GetIndex() != uint32(j) {
			return grpcError(codes.Internal, "reply scores[%d] has index %d", j, s.GetIndex())
		}
		// A NaN score cannot be ranked (it compares false) nor written as JSON; a node that
		// produces one is broken, so the batch fails and is retried elsewhere.
		if v := float64(s.GetScore()); math.IsNaN(v) || math.IsInf(v, 0) {
			return grpcError(codes.Internal, "reply scores[%d] is %v", j, v)
		}
	}
	return nil
}

// classify turns a call's error into what the breaker should count: nil (success), an error
// wrapping errExcluded (neither: cancellations, the caller's bad input, and deadlines that were
// the caller's — the call ran less than twice its expected completion plus 20ms), or a failure.
func classify(ctx context.Context, err error, el time.Duration, expected float64) error {
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.Canceled) {
		return fmt.Errorf("%w: %w", errExcluded, err)
	}
	switch status.Code(err) {
	case codes.Canceled, codes.InvalidArgument:
		return fmt.Errorf("%w: %w", errExcluded, err)
	case codes.DeadlineExceeded:
		if el.Seconds() < 2*expected+0.02 {
			return fmt.Errorf("%w: %w", errExcluded, err)
		}
	}
	return err
}

// merge builds the reply in input order, or the request's error.
// firstErr, when set, is the failure that cancelled the other batches (it, not their
// cancellations, is the request's reason).
func (p *Proxy) merge(ctx context.Context, req *relevancev1.ScoreRequest, reqID string, plans []*batchPlan, results []batchResult, firstErr error, start time.Time, planDur time.Duration) (*relevancev1.ScoreResponse, error) {
	partial := p.cfg.OnPartialFailure == PartialPartial || req.GetOptions().GetAllowPartial()
	failed := 0
	for _, r := range results {
		if r.err != nil {
			failed++
			if firstErr == nil {
				firstErr = r.err
			}
		}
	}
	if failed > 0 && (!partial || failed == len(results)) {
		return nil, requestError(ctx, firstErr)
	}
	out := &relevancev1.ScoreResponse{
		RequestId: reqID,
		Scores:    make([]*relevancev1.ItemScore, len(req.GetItems())),
		Usage:     &relevancev1.Usage{},
		Model:     req.GetModel(),
	}
	tm := &relevancev1.Timings{PlanSeconds: planDur.Seconds(), Batches: uint32(len(plans))}
	for bi, r := range results {
		pl := plans[bi]
		tm.Retries += uint32(r.retries)
		tm.Hedges += uint32(r.hedges)
		if r.err != nil {
			msg := requestError(ctx, r.err).Error()
			for _, i := range pl.items {
				out.Scores[i] = &relevancev1.ItemScore{Index: uint32(i), Id: req.GetItems()[i].GetId(), Status: relevancev1.ItemStatus_ITEM_STATUS_FAILED, Error: msg}
			}
			continue
		}
		for j, s := range r.resp.GetScores() {
			i := pl.items[j]
			s.Index = uint32(i)
			s.Id = req.GetItems()[i].GetId()
			out.Scores[i] = s
		}
		if out.Model == "" {
			out.Model = r.resp.GetModel()
		}
		if u := r.resp.GetUsage(); u != nil {
			out.Usage.PromptTokens += u.GetPromptTokens()
			out.Usage.PrefixTokens += u.GetPrefixTokens()
			out.Usage.PrefixTokensReused += u.GetPrefixTokensReused()
			out.Usage.ItemTokens += u.GetItemTokens()
			out.Usage.TokensTruncated += u.GetTokensTruncated()
		}
		if st := r.resp.GetStats(); st != nil {
			tm.QueueSeconds = math.Max(tm.QueueSeconds, st.GetQueueSeconds())
			tm.ComputeSeconds = math.Max(tm.ComputeSeconds, st.GetComputeSeconds())
		}
	}
	out.Ranking = ranking(out.Scores, int(req.GetTopN()))
	if req.GetOptions().GetReturnTimings() {
		tm.TotalSeconds = time.Since(start).Seconds()
		out.Timings = tm
	}
	return out, nil
}

// ranking lists scored items by score, best first (ties by index), cut to topN when > 0.
func ranking(scores []*relevancev1.ItemScore, topN int) []uint32 {
	idx := make([]uint32, 0, len(scores))
	for i, s := range scores {
		switch s.GetStatus() {
		case relevancev1.ItemStatus_ITEM_STATUS_OK, relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED, relevancev1.ItemStatus_ITEM_STATUS_UNSPECIFIED:
			idx = append(idx, uint32(i))
		}
	}
	slices.SortStableFunc(idx, func(a, b uint32) int { return cmp.Compare(scores[b].GetScore(), scores[a].GetScore()) })
	if topN > 0 && topN < len(idx) {
		idx = idx[:topN]
	}
	return idx
}

// requestError maps a batch failure to the request's status: the caller's cancellation or
// deadline when that is what happened, INVALID_ARGUMENT passed through, UNAVAILABLE otherwise.
func requestError(ctx context.Context, err error) error {
	switch {
	case errors.Is(ctx.Err(), context.Canceled):
		return grpcError(codes.Canceled, "request cancelled")
	case errors.Is(ctx.Err(), context.DeadlineExceeded), status.Code(err) == codes.DeadlineExceeded:
		return grpcError(codes.DeadlineExceeded, "deadline exceeded: %v", err)
	case status.Code(err) == codes.InvalidArgument:
		return err
	}
	return grpcError(codes.Unavailable, "batch failed: %v", err)
}
