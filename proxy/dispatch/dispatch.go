// Package dispatch is the request pipeline's third stage: it sends each planned batch to the node
// it was placed on and sees it through — breaker accounting, one retry on another node, optional
// hedging — until it is answered, fails for good, or the request ends.
//
// Rules.
//   - A batch goes to its plan's lease (package plan); a batch the plan could not place, a retry
//     and a hedge are placed by the same plan.Placer, excluding the nodes already tried.
//   - Retry: a failed batch is re-sent once to another node when the failure is retryable (not the
//     caller's cancellation, not INVALID_ARGUMENT, not a node's item limit: see Cut), the
//     deadline leaves at least the batch's predicted time, and the retry budget has a token. The
//     budget is a token bucket filled by BudgetRatio per batch up to BudgetBurst; a retry or
//     hedge takes a whole token, so retries stay under about BudgetRatio of traffic and a failing
//     cluster cannot double its own load.
//   - Hedge: when enabled and MinSamples batches have been seen, a batch still running after
//     q·expected (q the configured quantile of recent latency ÷ expected-finish ratios, at least
//     MinDelay) is sent to a second node too, if the placer's pick has less work ahead than the
//     straggler was expected to take and the budget allows; the first answer wins, the other call
//     is cancelled.
//   - Breakers count failures only: cancellations, the caller's bad input, deadlines that were
//     the caller's (the call ran less than 2·expected + 20 ms) and a node shedding load
//     (RESOURCE_EXHAUSTED: a full queue, an HTTP server's 429) are excluded. A shedding node is
//     alive and answering; counted, an overloaded cluster would trip its nodes' breakers in turn
//     and refuse everything (Envoy's outlier detection likewise leaves 429 out of its 5xx
//     counts). The batch is still retried on another node. A node answering that it does not
//     serve the configured model (backend.ErrModelNotServed) is not counted either: it is taken
//     out of traffic (cluster.ModelNotServed) until it does.
//   - Rescue: a batch still unanswered RescueFactor × its projected finish after it was sent (and
//     at least RescueMinLate past that finish) goes to a second node too, once, if the placer's
//     pick can finish it before the deadline and the retry budget allows. The timer is pulled in
//     to the latest moment at which the batch's own predicted time (×1.25, +10 ms) still fits
//     before the deadline; when even that moment is not past the projected finish, the plan was
//     tight and no rescue is timed (the slow mark below may still send one). When the timer
//     fires while the node is still within its projected schedule of everything charged to it
//     (cluster.Node.Ahead > 0: the batch may be late only because the node merged later batches
//     into its pass), a copy goes only to a node projected to finish it before that schedule
//     ends; else the rescue waits once for the schedule (+RescueMinLate, and no later than the
//     last moment a copy still makes the deadline). A rescue is no evidence against the node:
//     only the slow mark is.
//   - Stall: a batch overdue (past its projected finish by RescueMinLate, or due a rescue or a
//     slow mark) on a node that has answered nothing lately makes the cluster check the node's
//     health (cluster.SuspectStall). A node found stalled — silent, as a stopped process is —
//     takes no new batches, and every batch waiting on it is rescued at once, without waiting
//     for its schedule: a stalled node's schedule means nothing.
//   - Lost races are evidence. A call whose copy answered first while the call was far behind its
//     projection (at least halfway to its slow mark) but short of the mark is not cancelled:
//     detached from the request (which has its answer), it runs on until it answers — a late
//     outcome its node's speed and slowness learn from, kept out of the projections' error — or
//     reaches its slow mark, where it is counted slow and cancelled. Cancelled at once, it said
//     nothing: a node that had just slowed down lost every race to its rescues, was never counted
//     slow, looked idle after each cancelled call and kept getting a batch of every request, until
//     a burst left no time to rescue them (fault suite, slow10). The cost is bounded: at most
//     SlowFactor × the batch's projected finish of that node's time.
//   - Cut: a batch a node refused whole for its own limit on items per request (backend.ItemLimit:
//     a scorer node's max_items below split.max_batch_items, which the plan did not know yet) is
//     cut to that limit (plan.Batch.Cut) and its pieces are sent as batches of their own, each
//     placed, retried and hedged as above, without a budget token (the refusal cost the node
//     nothing and the pieces are the same work); their replies are joined into the batch's. The
//     node's refusal is never the caller's INVALID_ARGUMENT: if the batch cannot be cut (the
//     request has ended), it fails FAILED_PRECONDITION naming the limit, which the request
//     answers as UNAVAILABLE. A piece that fails for good fails the batch in fail-fast mode; with
//     partial results, only when every piece failed: else the batch is answered, the failed
//     pieces' items FAILED (Result.ItemErrs), so that the scores the other pieces got are kept.
//   - In fail-fast mode the first batch that fails for good cancels the others.
//   - Probe: a node back from an outlier ejection (package cluster: probation) gets a copy of the
//     request's smallest batch (at most the items the node takes per request), sent beside the
//     batch itself; the request never waits for it. Its outcome ends the probation or ejects the
//     node again, so a node that is still slow costs no request its deadline.
//
// A Dispatcher is safe for concurrent use.
package dispatch

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/reflect/protoreflect"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/cluster"
	"github.com/relevance-scoring/relevance/proxy/plan"
	"github.com/relevance-scoring/relevance/proxy/request"
)

// Config configures retries and hedging.
type Config struct {
	// RetryDisabled turns retries off.
	RetryDisabled bool
	// BudgetRatio and BudgetBurst size the retry budget (see the package doc).
	BudgetRatio, BudgetBurst float64
	// Hedge turns hedging on; HedgeQuantile, HedgeMinDelay and HedgeMinSamples tune it.
	Hedge           bool
	HedgeQuantile   float64
	HedgeMinDelay   time.Duration
	HedgeMinSamples int
	// SlowFactor and SlowMin: a call still unanswered after max(SlowFactor × its projected
	// finish, SlowMin) is slow (see the package doc). SlowFactor 0 turns slow detection off.
	SlowFactor float64
	SlowMin    time.Duration
	// RescueFactor and RescueMinLate time the rescue of an overdue batch (see the package doc);
	// RescueFactor 0 turns it off.
	RescueFactor  float64
	RescueMinLate time.Duration
	// TrustSamples: a batch's latency ÷ projected finish feeds the projections' measured error
	// (plan.Accuracy) only when its node's model had learned from this many replies at placement;
	// the first batches, priced by a prior that may be far off (another machine's), would
	// otherwise inflate admission's margin long after the nodes' own models replaced it.
	TrustSamples int
	// Log, when it is enabled at debug level, gets one record per call: its node, the plan's
	// projection and what happened (nil: none). It answers "why was this request late" after
	// the fact without a profiler.
	Log *slog.Logger
}

// Metrics are what dispatch records; nil fields record nothing.
type Metrics struct {
	Retries, Hedges, HedgeWins prometheus.Counter
	Rescues, RescuesDeferred   prometheus.Counter
	// CopiesRefused counts hedges and rescues that were due but placed nowhere, by kind and
	// reason (labels "kind", "reason"); nil: not counted.
	CopiesRefused *prometheus.CounterVec
	// LosersKept counts calls left running as evidence after losing their race (see attempt), by
	// outcome (LoserOutcomes); nil: not counted.
	LosersKept                   *prometheus.CounterVec
	BatchDuration, EstimateRatio prometheus.Observer
}

// LoserOutcomes are how a call left running after losing its race ends: answered (a late
// outcome, learned from), slow (counted slow at its slow mark, then cancelled), failed (another
// error, such as the deadline).
var LoserOutcomes = []string{"answered", "slow", "failed"}

// Result is one batch's outcome.
type Result struct {
	Resp    *relevancev1.ScoreBatchResponse
	Err     error
	Retries int
	Hedges  int
	// ItemErrs, when set (only in a run that is not fail-fast), are the batch's failed items: it
	// was cut (see the package doc) and some of its pieces failed while others were answered.
	// One per item of the batch, in its order: the error of the failed piece that held it, nil
	// for the items answered; Resp holds an ITEM_STATUS_FAILED score for each failed one, and
	// only the answered pieces' usage, model and fingerprint. Err is then nil.
	ItemErrs []error
	// Slow: a node the batch was sent to was counted slow for it (outlier detection's evidence
	// of a fault) or found stalled, so its lateness says nothing about the projections.
	Slow bool
}

// Dispatcher runs planned batches.
type Dispatcher struct {
	cfg     Config
	cluster *cluster.Cluster
	placer  *plan.Placer
	budget  *retryBudget
	acc     *plan.Accuracy
	m       Metrics
}

// New builds a dispatcher over c's nodes, placing retries and hedges with placer and recording
// every answered batch's latency ÷ projected finish in acc.
func New(cfg Config, c *cluster.Cluster, placer *plan.Placer, acc *plan.Accuracy, m Metrics) *Dispatcher {
	return &Dispatcher{cfg: cfg, cluster: c, placer: placer, budget: newRetryBudget(cfg.BudgetRatio, cfg.BudgetBurst), acc: acc, m: m}
}

// BudgetTokens is the retry budget's current balance.
func (d *Dispatcher) BudgetTokens() float64 {
	d.budget.mu.Lock()
	defer d.budget.mu.Unlock()
	return d.budget.tokens
}

// Run sends every batch of p and waits for all of them. With failFast, the first batch that fails
// for good cancels the others and is returned as firstErr (it, not their cancellations, is the
// request's reason).
func (d *Dispatcher) Run(ctx context.Context, p *plan.Plan, failFast bool) (results []Result, firstErr error) {
	bctx, stop := context.WithCancel(ctx)
	defer stop()
	var failOnce sync.Once
	results = make([]Result, len(p.Batches))
	var wg sync.WaitGroup
	d.probe(ctx, p)
	for bi, b := range p.Batches {
		first := b.Lease
		b.Lease = nil // the dispatcher owns it now
		wg.Go(func() {
			r := d.runBatch(bctx, b, first, p.ItemTokens, failFast)
			results[bi] = r
			if r.Err != nil && failFast {
				failOnce.Do(func() { firstErr = r.Err; stop() })
			}
		})
	}
	wg.Wait()
	return results, firstErr
}

// probe sends a copy of p's smallest batch to a node on probation, if there is one (see the
// package doc). The probe runs detached from the request (until its deadline, or ten times its
// projected finish when it has none) so that its outcome is seen even when the request is
// answered first; it is counted slow once it runs past SlowFactor × its projected finish.
func (d *Dispatcher) probe(ctx context.Context, p *plan.Plan) {
	if len(p.Batches) == 0 {
		return
	}
	n := d.cluster.TakeProbe()
	if n == nil {
		return
	}
	b := p.Batches[0]
	for _, c := range p.Batches[1:] {
		if len(c.Items) < len(b.Items) {
			b = c
		}
	}
	// The batches were cut for the planning candidates, which a node on probation is not: a
	// server that takes fewer documents per request (TEI: 32) would refuse the whole batch
	// before it is sent, an outcome that neither ends nor extends the probation, and under large
	// requests the node would never come back. Its limit's worth of the batch probes it as well.
	b = b.Head(n.Limits().MaxItems, p.ItemTokens)
	l := d.placer.PlaceOn(b.Work(), n)
	if l == nil {
		n.ProbeEnded()
		return
	}
	pctx := context.WithoutCancel(ctx)
	var cancel context.CancelFunc
	if dl, ok := ctx.Deadline(); ok {
		pctx, cancel = context.WithDeadline(pctx, dl)
	} else {
		pctx, cancel = context.WithTimeout(pctx, time.Second+time.Duration(10*l.Finish*float64(time.Second)))
	}
	go func() {
		defer cancel()
		defer n.ProbeEnded()
		var mk callMarks
		if delay, ok := d.slowAfter(l.Finish); ok {
			t := time.AfterFunc(delay, func() {
				if mk.slow.CompareAndSwap(false, true) {
					d.cluster.ReportSlow(n, time.Now(), d.cfg.SlowFactor)
				}
			})
			defer t.Stop()
		}
		_, _ = d.call(pctx, l, b, &mk)
	}()
}

// runBatch sends one batch (first to the node leased at planning time, when there is one),
// retrying once on another node under the retry budget, or cutting it to the item limit of a
// node that refused it whole (itemTokens: the plan's, to price the pieces; failFast: the run's,
// see cut).
func (d *Dispatcher) runBatch(ctx context.Context, b *plan.Batch, first *plan.Lease, itemTokens []int, failFast bool) Result {
	d.budget.deposit()
	var tried []*cluster.Node
	var res Result
	for attempt := range 2 {
		if attempt == 1 && (d.cfg.RetryDisabled || !retryable(ctx, res.Err) || backend.ItemLimit(res.Err) > 0) {
			break
		}
		l := first
		first = nil
		if l == nil {
			l = d.placer.Place(b.Work(), tried)
		}
		if l == nil {
			if res.Err == nil {
				res.Err = status.Errorf(codes.Unavailable, "batch %d: no healthy scorer node to take it", b.Index)
			}
			break
		}
		if attempt == 1 {
			// A retry goes out only where its placement says it can finish before the deadline,
			// and only then spends the budget: a retry that cannot succeed would take the token
			// the next batch lost to a real crash needs.
			if !fitsDeadline(ctx, l) || !d.budget.take() {
				l.Release()
				break
			}
			res.Retries++
			inc(d.m.Retries)
		}
		tried = append(tried, l.Node)
		resp, hedged, slow, err := d.attempt(ctx, b, l, &tried)
		res.Resp, res.Err = resp, err
		res.Hedges += hedged
		res.Slow = res.Slow || slow
		if err == nil {
			break
		}
	}
	if k := backend.ItemLimit(res.Err); k > 0 && k < len(b.Items) && ctx.Err() == nil {
		return d.cut(ctx, b, k, itemTokens, failFast, res)
	}
	res.Err = requestFields(res.Err, b.Items)
	return res
}

// cut runs b as pieces of at most k items, after a node refused it whole for its own limit of k
// items per request (refused: that outcome), and joins the pieces' outcomes into b's. A piece
// refused again (by a node of a smaller limit) is cut again, so it ends: pieces only shrink. A
// failed piece fails b when failFast or when every piece failed (with the first piece's error);
// otherwise b is answered with the failed pieces' items FAILED (Result.ItemErrs), as merge
// answers a failed batch's items with partial results.
func (d *Dispatcher) cut(ctx context.Context, b *plan.Batch, k int, itemTokens []int, failFast bool, refused Result) Result {
	pieces := b.Cut(k, itemTokens)
	rs := make([]Result, len(pieces))
	var wg sync.WaitGroup
	for i, pc := range pieces {
		wg.Go(func() { rs[i] = d.runBatch(ctx, pc, nil, itemTokens, failFast) })
	}
	wg.Wait()
	out := Result{Retries: refused.Retries, Hedges: refused.Hedges, Slow: refused.Slow}
	for _, r := range rs {
		out.Retries += r.Retries
		out.Hedges += r.Hedges
		out.Slow = out.Slow || r.Slow
		if r.Err != nil && out.Err == nil {
			out.Err = r.Err // already naming the request's items (requestFields)
		}
	}
	if out.Err != nil && failFast {
		return out
	}
	resp, itemErrs, err := joinReplies(pieces, rs)
	switch {
	case err != nil:
		out.Err = err
	case len(itemErrs) > 0 && !slices.Contains(itemErrs, nil):
		// Every piece failed (or every item of those answered by a piece cut again): the batch
		// failed, as a batch that was not cut would have.
		if out.Err == nil {
			out.Err = itemErrs[0]
		}
	default:
		out.Resp, out.ItemErrs, out.Err = resp, itemErrs, nil
	}
	return out
}

// joinReplies is the reply of a batch cut into pieces (cut), from the pieces' outcomes rs in item
// order: their scores indexed in the batch, usage summed, the largest queue and compute time of a
// piece (what merge reads of a batch), and the model and fingerprint they share (none when a
// piece came without one, so that none of the batch's scores is cached as the served model's).
// Each piece's reply was learned from when it came. Pieces answered by nodes of two fingerprints
// (a rolling update, with the request not pinned to one) must not be mixed: UNAVAILABLE, as the
// request's own batches would be (proxy.oneModel). A failed piece (one with an error: whatever
// reply it holds, such as another model's, is not read) stands as ITEM_STATUS_FAILED scores of
// its items, with nothing in usage, model or fingerprint; itemErrs (nil when no piece failed)
// gives each item of the batch its piece's error, nil for the answered ones.
func joinReplies(pieces []*plan.Batch, rs []Result) (resp *relevancev1.ScoreBatchResponse, itemErrs []error, err error) {
	out := &relevancev1.ScoreBatchResponse{Usage: &relevancev1.Usage{}, Stats: &relevancev1.BatchStats{}}
	anonymous := false
	failed := false
	for i, r := range rs {
		if r.Err != nil {
			failed = true
			for range pieces[i].Items {
				itemErrs = append(itemErrs, r.Err)
				out.Scores = append(out.Scores, &relevancev1.ItemScore{Index: uint32(len(out.Scores)), Status: relevancev1.ItemStatus_ITEM_STATUS_FAILED, Error: r.Err.Error()})
			}
			continue
		}
		p := r.Resp
		for j, s := range p.GetScores() {
			s.Index = uint32(len(out.Scores))
			out.Scores = append(out.Scores, s)
			var e error
			if j < len(r.ItemErrs) { // a piece cut again, some of its own pieces failed
				e = r.ItemErrs[j]
				failed = failed || e != nil
			}
			itemErrs = append(itemErrs, e)
		}
		if u := p.GetUsage(); u != nil {
			out.Usage.PromptTokens += u.GetPromptTokens()
			out.Usage.PrefixTokens += u.GetPrefixTokens()
			out.Usage.PrefixTokensReused += u.GetPrefixTokensReused()
			out.Usage.ItemTokens += u.GetItemTokens()
			out.Usage.TokensTruncated += u.GetTokensTruncated()
			out.Usage.CachedItems += u.GetCachedItems()
		}
		out.Stats.QueueSeconds = max(out.Stats.QueueSeconds, p.GetStats().GetQueueSeconds())
		out.Stats.ComputeSeconds = max(out.Stats.ComputeSeconds, p.GetStats().GetComputeSeconds())
		if out.Model == "" {
			out.Model = p.GetModel()
		}
		switch fp := p.GetModelFingerprint(); {
		case fp == "":
			anonymous = true
		case out.ModelFingerprint == "":
			out.ModelFingerprint = fp
		case fp != out.ModelFingerprint:
			return nil, nil, status.Errorf(codes.Unavailable, "the model changed while the batch was served (fingerprints %s and %s); retry", out.ModelFingerprint, fp)
		}
	}
	if anonymous {
		out.ModelFingerprint = ""
	}
	if !failed {
		itemErrs = nil
	}
	return out, itemErrs, nil
}

// requestFields rewrites a node's INVALID_ARGUMENT about one of the batch's items ("items[2].text",
// the batch's third item) to name that item's place in the request ("items[17].text"), so that
// the caller is told which of its items is wrong. Other errors pass unchanged.
func requestFields(err error, items []int) error {
	if status.Code(err) != codes.InvalidArgument {
		return err
	}
	field, problem, ok := request.Violation(err)
	rest, found := strings.CutPrefix(field, "items[")
	if !ok || !found {
		return err
	}
	num, tail, found := strings.Cut(rest, "]")
	j, perr := strconv.Atoi(num)
	if !found || perr != nil || j < 0 || j >= len(items) {
		return err
	}
	return request.FieldError(fmt.Sprintf("items[%d]%s", items[j], tail), "%s", problem)
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

// attempt runs the batch on its lease and, if the first call straggles, on a second node: a hedge
// after the hedging delay (when enabled), or a rescue once the call is slow. The first answer
// wins and the other call is cancelled — except a first call that lost to its copy before its
// slow mark, which runs on as evidence about its node (see the package doc). Otherwise it returns
// only after every call it started has returned.
func (d *Dispatcher) attempt(ctx context.Context, b *plan.Batch, l *plan.Lease, tried *[]*cluster.Node) (resp *relevancev1.ScoreBatchResponse, hedges int, slow bool, err error) {
	type result struct {
		resp  *relevancev1.ScoreBatchResponse
		err   error
		hedge bool
	}
	ch := make(chan result, 2)
	// The first call keeps the request's deadline and follows its cancellation until a copy wins
	// the race; then it may be left to run (see below), and whoever holds it last calls cancel1.
	c1 := context.WithoutCancel(ctx)
	cancelDL := context.CancelFunc(func() {})
	if dl, ok := ctx.Deadline(); ok {
		c1, cancelDL = context.WithDeadline(c1, dl)
	}
	c1, cancelOnly := context.WithCancel(c1)
	cancel1 := func() { cancelOnly(); cancelDL() }
	follow := context.AfterFunc(ctx, func() {
		if dl, ok := ctx.Deadline(); ok && (errors.Is(ctx.Err(), context.DeadlineExceeded) || time.Until(dl) < deadlineSlack) {
			// c1 has the same deadline and expires on its own as DeadlineExceeded. Cancelled
			// here instead, the call would end Canceled and be taken for the caller's doing, and
			// a node hung past the request's deadline would go uncounted: whenever the request's
			// timer fired before the call's, and always for a gRPC client's own deadline, which
			// reaches the proxy as the client's cancel at that deadline.
			return
		}
		cancel1()
	})
	lingers := false
	defer func() {
		if !lingers {
			follow()
			cancel1()
		}
	}()
	var mk1 callMarks
	t0 := time.Now()
	go func() {
		r, e := d.call(c1, l, b, &mk1)
		ch <- result{r, e, false}
	}()
	var hedgeC, stuckC, rescueC <-chan time.Time
	if delay, ok := d.hedgeDelay(ctx, l.Finish); ok {
		t := time.NewTimer(delay)
		defer t.Stop()
		hedgeC = t.C
	}
	var rescueT *time.Timer
	var rescueBy time.Time // the latest moment a rescue can still make the deadline
	deferred := false
	if delay, latest, ok := d.rescueAfter(ctx, l); ok {
		rescueT = time.NewTimer(delay)
		defer rescueT.Stop()
		rescueC, rescueBy = rescueT.C, time.Now().Add(latest)
	}
	slowAt, slowOn := d.slowAfter(l.Finish)
	if slowOn {
		t := time.NewTimer(slowAt)
		defer t.Stop()
		stuckC = t.C
	}
	// markSlow counts the first call slow (once): evidence against its node, before it ends.
	markSlow := func() {
		d.cluster.SuspectStall(l.Node, time.Now())
		if mk1.slow.CompareAndSwap(false, true) {
			d.cluster.ReportSlow(l.Node, time.Now(), d.cfg.SlowFactor)
		}
	}
	// Overdue on a node that has answered nothing lately: is it stalled (package cluster)? Every
	// call waiting on a stalled node hears of it through stallC and is rescued at once.
	overdue := time.NewTimer(time.Duration(l.Finish*float64(time.Second)) + d.cfg.RescueMinLate)
	defer overdue.Stop()
	overdueC, stallC := overdue.C, l.Node.StallSignal()
	var l2 *plan.Lease
	for l2 == nil {
		select {
		case r := <-ch:
			return r.resp, 0, mk1.slow.Load(), r.err
		case <-overdueC:
			overdueC = nil
			d.cluster.SuspectStall(l.Node, time.Now())
		case <-stallC:
			// The node does not answer at all: no schedule of its is worth waiting for. Its
			// call, if it is answered after all, says nothing of the node's speed or of the
			// plan's error: marked as counted, it is neither learned from nor counted slow (a
			// stall is the stall detector's business, not an outlier's outcome).
			stallC = nil
			mk1.slow.CompareAndSwap(false, true)
			if l2 = d.placeRescue(ctx, "stall", *tried, b, math.Inf(1)); l2 != nil {
				inc(d.m.Rescues)
			}
		case <-hedgeC:
			hedgeC = nil
			l2 = d.placeHedge(ctx, *tried, b, l.Finish)
		case <-rescueC:
			// Overdue while a second node can still make the deadline: send it there too. The
			// node is not blamed: a batch 1.5× late is load or noise as often as a fault.
			rescueC = nil
			d.cluster.SuspectStall(l.Node, time.Now()) // the copy may win: ask now, not at overdueC
			// A node merges the batches queued when a pass starts into that pass, so a batch
			// answers when its pass ends, after batches placed behind it: late against its own
			// slot in the node's queue, on time against the node's whole schedule. While the node
			// is still within the schedule of everything charged to it, a copy is sent only where
			// it is projected to finish before that schedule does (an idler node); otherwise the
			// rescue waits for the schedule (once, and no later than the last moment a copy still
			// makes the deadline). A stalled or slow node overruns its schedule and is rescued
			// then (and marked slow by the timer below).
			before, wait := math.Inf(1), time.Duration(0)
			if now := time.Now(); !deferred {
				if ahead := l.Node.Ahead(now); ahead > 0 {
					if wait = min(time.Duration(ahead*float64(time.Second))+d.cfg.RescueMinLate, rescueBy.Sub(now)); wait > 0 {
						before = ahead
					}
				}
			}
			if l2 = d.placeRescue(ctx, "rescue", *tried, b, before); l2 != nil {
				inc(d.m.Rescues)
			} else if !math.IsInf(before, 1) {
				deferred = true
				rescueT.Reset(wait)
				rescueC = rescueT.C
				inc(d.m.RescuesDeferred)
			}
		case <-stuckC:
			// Slow: evidence against the node now, before the call ends, and a rescue on
			// another node while the deadline allows.
			stuckC = nil
			markSlow()
			l2 = d.placeRescue(ctx, "slow", *tried, b, math.Inf(1))
		}
	}
	*tried = append(*tried, l2.Node)
	inc(d.m.Hedges)
	c2, cancel2 := context.WithCancel(ctx)
	defer cancel2()
	var mk2 callMarks
	go func() {
		r, e := d.call(c2, l2, b, &mk2)
		ch <- result{r, e, true}
	}()
	// The first call is still judged while the copy runs: reaching its slow mark counts against
	// its node as it would have without a copy.
	var win result
	for got := false; !got; {
		select {
		case win = <-ch:
			got = true
		case <-stuckC:
			stuckC = nil
			markSlow()
		}
	}
	switch {
	case win.err == nil && win.hedge && stuckC != nil && d.lostFar(l, time.Since(t0)) && follow():
		lingers = true
		mk1.lost.Store(true)
		// The copy won while the first call was far behind its projection but not yet at its
		// slow mark. Cancelled now, it would say nothing about its node: the node that has just
		// slowed down loses every race to its rescues, is never counted slow, keeps looking idle
		// (every cancelled call settles it) and keeps getting batches — until a burst leaves no
		// time to rescue them. So it is left to run, detached from the request, until it
		// answers (a late outcome, learned from) or reaches its slow mark (counted slow),
		// whichever is first: at most (SlowFactor − its lateness so far) × its projected
		// finish of one node's time.
		cancel2()
		left := slowAt - time.Since(t0)
		go func() {
			defer cancel1()
			t := time.NewTimer(max(left, 0))
			defer t.Stop()
			outcome := "answered"
			select {
			case r := <-ch:
				if r.err != nil {
					outcome = "failed"
				}
			case <-t.C:
				outcome = "slow"
				markSlow()
				cancel1()
				<-ch
			}
			if d.m.LosersKept != nil {
				d.m.LosersKept.WithLabelValues(outcome).Inc()
			}
		}()
	case win.err == nil:
		// Cancel the loser and wait for it (a cancelled RPC returns at once).
		cancel1()
		cancel2()
		<-ch
	default:
		if second := <-ch; second.err == nil {
			win = second
		}
	}
	if win.err == nil && win.hedge {
		inc(d.m.HedgeWins)
	}
	return win.resp, 1, mk1.slow.Load() || mk2.slow.Load(), win.err
}

// deadlineSlack: a request cancelled this close to its deadline is taken for one whose deadline
// passed (see attempt).
const deadlineSlack = 10 * time.Millisecond

// fitsDeadline reports whether a lease's projected finish comes before ctx's deadline.
func fitsDeadline(ctx context.Context, l *plan.Lease) bool {
	dl, ok := ctx.Deadline()
	return !ok || time.Until(dl).Seconds() >= l.Finish
}

// placeHedge places a hedge of b through the placer, keeping it only if the chosen node has less
// work ahead than the straggler was expected to take (expected seconds), it can finish before the
// deadline, and the retry budget allows.
func (d *Dispatcher) placeHedge(ctx context.Context, exclude []*cluster.Node, b *plan.Batch, expected float64) *plan.Lease {
	return d.placeCopy(ctx, "hedge", exclude, b, func(l *plan.Lease) bool { return l.Start < expected })
}

// placeRescue places a second copy of a slow batch through the placer, if it can finish before
// the deadline and within before seconds from now, and the retry budget allows.
func (d *Dispatcher) placeRescue(ctx context.Context, kind string, exclude []*cluster.Node, b *plan.Batch, before float64) *plan.Lease {
	return d.placeCopy(ctx, kind, exclude, b, func(l *plan.Lease) bool { return l.Finish < before })
}

// CopyKinds and CopyRefusals are the label values of Metrics.CopiesRefused (kind, reason).
var (
	CopyKinds    = []string{"hedge", "rescue", "slow", "stall"}
	CopyRefusals = []string{"no_node", "deadline", "not_sooner", "budget"}
)

// placeCopy places a second copy of b (a hedge or a rescue: kind) through the placer and keeps it
// when sooner accepts it, it can finish before the deadline and the retry budget has a token; a
// copy refused is counted by its reason.
func (d *Dispatcher) placeCopy(ctx context.Context, kind string, exclude []*cluster.Node, b *plan.Batch, sooner func(*plan.Lease) bool) *plan.Lease {
	l := d.placer.Place(b.Work(), exclude)
	reason := ""
	switch {
	case l == nil:
		reason = "no_node"
	case !fitsDeadline(ctx, l):
		reason = "deadline"
	case !sooner(l):
		reason = "not_sooner"
	case !d.budget.take():
		reason = "budget"
	default:
		return l
	}
	if l != nil {
		l.Release()
	}
	if d.m.CopiesRefused != nil {
		d.m.CopiesRefused.WithLabelValues(kind, reason).Inc()
	}
	return nil
}

// rescueAfter is when an unanswered call on lease l is rescued (see the package doc), counted
// from now, with the latest moment (also from now) at which a rescue can still make the deadline;
// ok is false when no rescue is timed.
func (d *Dispatcher) rescueAfter(ctx context.Context, l *plan.Lease) (after, latest time.Duration, ok bool) {
	if !(d.cfg.RescueFactor > 0) || !(l.Finish > 0) {
		return 0, 0, false
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return 0, 0, false
	}
	// The latest useful moment: a second node, idle, still finishes the batch by the deadline.
	last := time.Until(dl).Seconds() - (1.25*l.Predicted + 0.010)
	if last <= l.Finish {
		return 0, 0, false
	}
	at := min(max(d.cfg.RescueFactor*l.Finish, l.Finish+d.cfg.RescueMinLate.Seconds()), last)
	return time.Duration(at * float64(time.Second)), time.Duration(last * float64(time.Second)), true
}

// lostFar reports whether a call on lease l that lost its race to a copy after running el was far
// enough behind its projection to be left running as evidence (see attempt): halfway to its slow
// mark, (1 + SlowFactor)/2 × its projected finish (2× by default). Calls that lose closer to
// their projection are the ordinary losers of hedges under load, whose few extra milliseconds say
// little about their node: left running, they only take node time from the next requests (at 2×
// overload on the fault suite, letting every loser run gave 22 late requests on three traces
// against 17–18 without; gated, 18).
func (d *Dispatcher) lostFar(l *plan.Lease, el time.Duration) bool {
	return l.Finish > 0 && el.Seconds() >= (1+d.cfg.SlowFactor)/2*l.Finish
}

// slowAfter is when a call expected to finish in expected seconds becomes slow.
func (d *Dispatcher) slowAfter(expected float64) (time.Duration, bool) {
	if !(d.cfg.SlowFactor > 0) {
		return 0, false
	}
	ns := d.cfg.SlowFactor * expected * float64(time.Second)
	if ns >= math.MaxInt64 {
		// A huge slow_factor (1e9, .inf: "never slow") overflows Duration, and the conversion
		// gives the most negative one on amd64: every batch would be slow at slow_min.
		return time.Duration(math.MaxInt64), true
	}
	return max(time.Duration(ns), d.cfg.SlowMin), true
}

// hedgeDelay is how long to wait before hedging a batch expected to finish in expected seconds:
// the configured quantile of recent (latency ÷ expected) ratios times expected.
func (d *Dispatcher) hedgeDelay(ctx context.Context, expected float64) (time.Duration, bool) {
	if !d.cfg.Hedge {
		return 0, false
	}
	q, n := d.acc.Quantile(d.cfg.HedgeQuantile)
	if n < d.cfg.HedgeMinSamples {
		return 0, false
	}
	delay := max(time.Duration(q*expected*float64(time.Second)), d.cfg.HedgeMinDelay)
	if dl, ok := ctx.Deadline(); ok && time.Until(dl) <= delay {
		return 0, false
	}
	return delay, true
}

// call runs one ScoreBatch on the lease's node, then settles the lease's charge, reports the
// outcome to the breaker and to outlier detection, and learns from a success (mk: see
// callMarks).
func (d *Dispatcher) call(ctx context.Context, l *plan.Lease, b *plan.Batch, mk *callMarks) (*relevancev1.ScoreBatchResponse, error) {
	n := l.Node
	t0 := time.Now()
	items := len(b.Req.GetItems())
	n.PairsStarted(items)
	resp, err := n.ScoreBatch(ctx, queuedAhead(b.Req, l.Start))
	el := time.Since(t0)
	n.PairsEnded(items)
	n.Settle(time.Now(), l.Predicted)
	if err == nil {
		err = checkReply(resp, len(b.Req.GetItems()))
	}
	if err == nil {
		// Name and fingerprint together, also from a reply refused below: the node is known by
		// its new model under its new name, which a reply of that model's cached scores carries.
		n.SetModel(resp.GetModel(), resp.GetModelFingerprint())
		if fp := resp.GetModelFingerprint(); b.Fingerprint != "" && fp != "" && fp != b.Fingerprint {
			// The node changed model under the request (a rolling update): its scores must not be
			// mixed with the other batches'. Another node of the request's model takes the batch.
			err = status.Errorf(codes.Aborted, "node %s answers with model fingerprint %s; the request is served by %s", n.Addr(), fp, b.Fingerprint)
		}
	}
	if err == nil || ctx.Err() == nil && status.Code(err) != codes.Unavailable && status.Code(err) != codes.Canceled {
		d.cluster.Answered(n, time.Now()) // the node said something: not stalled
	}
	verdict := classify(ctx, err, el, l.Finish)
	if l.Done != nil {
		l.Done(verdict)
	}
	now := time.Now()
	// What the projection is judged on: the latency less what the node added by merging the
	// batch into a longer pass (or plus what merging saved it). The node merges only where every
	// deadline in the pass still holds, so that delay is no error of the plan's: counted, it
	// would widen admission's margin and make a node that merges a lot look slow.
	judged := el - time.Duration(resp.GetStats().GetMergeDelaySeconds()*float64(time.Second))
	if err != nil || judged <= 0 {
		judged = el
	}
	scored := err == nil && computed(resp)
	d.outlier(ctx, l, err, scored, judged, mk, now, t0)
	if lg := d.cfg.Log; lg != nil && lg.Enabled(ctx, slog.LevelDebug) {
		lg.LogAttrs(ctx, slog.LevelDebug, "batch call ended", slog.String("request", b.Req.GetRequestId()), slog.Int("batch", b.Index),
			slog.String("node", n.Addr()), slog.Int("items", items), slog.Float64("ahead_s", l.Start), slog.Float64("predicted_s", l.Predicted),
			slog.Float64("projected_s", l.Finish), slog.Float64("elapsed_s", el.Seconds()), slog.Bool("slow", mk.slow.Load()), slog.Bool("lost", mk.lost.Load()), slog.Any("err", err))
	}
	switch {
	case err == nil && !scored:
		// Every item too long to send (TOO_LONG): the node computed nothing, and the call's
		// few microseconds priced at the batch's whole work would teach its cost model that it
		// is hundreds of times faster than it is.
		n.Succeeded()
	case err == nil:
		n.Succeeded()
		n.Observe(resp, now)
		if n.Kind() != backend.KindScorer && !(resp.GetStats().GetComputeSeconds() > 0) {
			// Another kind of server reports no compute time: learn from latency. (Our scorer
			// always does; one that reports none has nothing to learn from.)
			n.ObserveLatency(l.Features, el.Seconds(), items, l.Alone)
		}
		n.Remember(b.PrefixKey, resp.GetStats().GetPrefixCached())
		b.LearnTokens(resp)
		observe(d.m.BatchDuration, el.Seconds())
		if !mk.slow.Load() && !mk.lost.Load() {
			d.record(l, judged)
		}
		pred := l.Predicted
		if resp.GetStats().GetPrefixCached() {
			// Less the prefix work the lease priced (none where the node was believed to hold
			// the prefix; the rest after the template where it keeps templates).
			w := b.Work()
			pred -= l.Coeffs.Seconds(l.Features.Sub(w.Features.Sub(w.Prefix)))
		}
		if cs := resp.GetStats().GetComputeSeconds(); cs > 0 && pred > 0 {
			observe(d.m.EstimateRatio, cs/pred)
		}
	case status.Code(err) == codes.ResourceExhausted && ctx.Err() == nil && !tooLarge(err):
		// The node is full (not failing): it answers, so the breaker leaves it alone, but it
		// must not look idle. Its queue holds work sent, as this batch was, to be done within a
		// deadline; until this batch's deadline (its RetryInfo when it gave one) take it as busy.
		n.Shed(now, shedHold(ctx, err, now))
		err = fmt.Errorf("node %s: %w", n.Addr(), err)
	case errors.Is(err, backend.ErrModelNotServed):
		// Not the node failing but serving another model: out of traffic until it serves the
		// configured one (classify kept it from the breaker; the batch is retried elsewhere).
		d.cluster.ModelNotServed(n, err)
		err = fmt.Errorf("node %s: %w", n.Addr(), err)
	case !errors.Is(verdict, cluster.ErrExcluded):
		n.Failed(now)
		if status.Code(err) == codes.Unimplemented && n.FirstMisconfigured() && d.cfg.Log != nil {
			// Healthy, and answering every batch "no such endpoint or model": a configuration
			// to fix, which breaker states alone do not say.
			d.cfg.Log.Warn("scorer node answers that the endpoint or model does not exist: check its kind, url and model",
				"node", n.Addr(), "kind", n.Kind(), "err", err)
		}
		err = fmt.Errorf("node %s: %w", n.Addr(), err)
	}
	n.CallEnded()
	return resp, err
}

// tooLarge reports gRPC's own RESOURCE_EXHAUSTED for a message over the size limit (sent or
// received): the batch's size, not the node's load, so not a shed.
func tooLarge(err error) bool {
	return strings.Contains(status.Convert(err).Message(), "larger than max")
}

// shedHold is how long a node that refused a call as full is taken to stay busy: its RetryInfo
// delay when it sent one, else the time left to the call's deadline, within [shedMin, shedMax].
func shedHold(ctx context.Context, err error, now time.Time) time.Duration {
	hold := shedMax
	if dl, ok := ctx.Deadline(); ok {
		hold = dl.Sub(now)
	}
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok && ri.GetRetryDelay() != nil {
			hold = ri.GetRetryDelay().AsDuration()
		}
	}
	return min(max(hold, shedMin), shedMax)
}

// The bounds of shedHold: long enough that the next batches go elsewhere, short enough that a
// node which shed one burst is back in rotation within a second.
const (
	shedMin = 50 * time.Millisecond
	shedMax = time.Second
)

// computed reports whether the node scored any item of its reply (OK or cut to fit).
func computed(resp *relevancev1.ScoreBatchResponse) bool {
	for _, s := range resp.GetScores() {
		if st := s.GetStatus(); st == relevancev1.ItemStatus_ITEM_STATUS_OK || st == relevancev1.ItemStatus_ITEM_STATUS_TRUNCATED {
			return true
		}
	}
	return false
}

// outlier reports a call's outcome to outlier detection: OK when it was answered and not counted
// slow; slow when the node itself refused the batch for its deadline (its own estimate says it
// cannot do what the plan projected) or the request's deadline passed with the call running
// beyond its projected finish. Cancellations and other failures are the breaker's.
func (d *Dispatcher) outlier(ctx context.Context, l *plan.Lease, err error, scored bool, el time.Duration, mk *callMarks, now, start time.Time) {
	switch {
	case err == nil:
		if !mk.slow.Load() && scored { // a reply that computed nothing says nothing of the node's speed
			d.cluster.ReportOK(l.Node, start, now, ratio(el, l.Finish))
		}
	case status.Code(err) == codes.DeadlineExceeded && (ctx.Err() == nil || el.Seconds() > l.Finish+d.cfg.SlowMin.Seconds()):
		// A refusal (the node's own estimate says the batch cannot make the deadline) is
		// evidence against the node only when the plan had left it ample slack — at most half
		// the time left projected: then the node is far slower than it is believed to be (the
		// black hole of a slowed node). A refusal of a batch the plan already knew was tight is
		// the node being busy, which is load, not a fault: counted as slow, every node of a
		// loaded cluster would be ejected in turn.
		dl, ok := ctx.Deadline()
		tight := ctx.Err() == nil && ok && 2*l.Finish > dl.Sub(start).Seconds()
		if !tight && mk.slow.CompareAndSwap(false, true) {
			d.cluster.ReportSlow(l.Node, now, max(ratio(el, l.Finish), d.cfg.SlowFactor))
		}
		// A miss is a lower bound on the batch's latency: it keeps the projections' error honest
		// (only answered batches would bias it low) — unless the node was counted slow: a broken
		// node's batches are outlier detection's business, and in the window they would inflate
		// every request's admission margin. The bound is the deadline, not the call's length: a
		// node refuses a batch as soon as it reaches it and finds that it cannot finish before the
		// deadline, so the refusal comes early, and recorded at its own time (under 2× overload,
		// typically 0.94 of a projection the batch would have overrun by 5–10 %) it taught the
		// window that the plan had been early for the very batches it was late for.
		if !mk.slow.Load() && !mk.lost.Load() {
			if dl, ok := ctx.Deadline(); ok {
				el = max(el, dl.Sub(start))
			}
			d.record(l, el)
		}
	}
}

// callMarks are what a call's caller learns about it while it runs. slow: it was counted slow
// (by attempt's timer, a probe's, or outlier), so it is counted once and its latency is not
// learned as the projections' error. lost: a copy answered the batch first and the call was left
// to run only as evidence about its node: its outcome still teaches the node's speed and
// slowness, but its latency is no request's and stays out of the projections' error.
type callMarks struct {
	slow, lost atomic.Bool
}

// queuedAhead is r as sent on one lease: a shallow copy (the items are shared, never written)
// carrying the seconds of work the placement projected ahead of the batch on its node, which the
// node queues it by. Calls of one burst reach a node in whatever order their goroutines run; queued
// in that order, a batch placed second could run third, answered a whole batch later than its
// projection (on `make run`'s cluster such swaps took batches to 1.4–2× their projected finish, and
// admission's margin with them).
func queuedAhead(r *relevancev1.ScoreBatchRequest, ahead float64) *relevancev1.ScoreBatchRequest {
	c := &relevancev1.ScoreBatchRequest{}
	dst := c.ProtoReflect()
	r.ProtoReflect().Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		dst.Set(fd, v)
		return true
	})
	if ahead > 0 { // NaN, negative: none
		c.QueuedAheadSeconds = ahead
	}
	return c
}

// ratio is a latency over its projected finish (0 when there was no projection).
func ratio(el time.Duration, finish float64) float64 {
	if !(finish > 0) {
		return 0
	}
	return el.Seconds() / finish
}

// record adds a trusted projection's error to the accuracy window.
func (d *Dispatcher) record(l *plan.Lease, el time.Duration) {
	if l.Finish > 0 && l.Samples >= int64(d.cfg.TrustSamples) {
		d.acc.Add(el.Seconds() / l.Finish)
	}
}

// checkReply rejects a reply that does not hold one score per item in batch order: merging it
// would put scores on the wrong items.
func checkReply(resp *relevancev1.ScoreBatchResponse, items int) error {
	if len(resp.GetScores()) != items {
		return status.Errorf(codes.Internal, "reply has %d scores for %d items", len(resp.GetScores()), items)
	}
	for j, s := range resp.GetScores() {
		if s == nil || s.GetIndex() != uint32(j) {
			return status.Errorf(codes.Internal, "reply scores[%d] has index %d", j, s.GetIndex())
		}
		// A NaN score cannot be ranked (it compares false) nor written as JSON; a node that
		// produces one is broken, so the batch fails and is retried elsewhere.
		if v := float64(s.GetScore()); math.IsNaN(v) || math.IsInf(v, 0) {
			return status.Errorf(codes.Internal, "reply scores[%d] is %v", j, v)
		}
	}
	return nil
}

// classify turns a call's error into what the breaker should count: nil (success), an error
// wrapping cluster.ErrExcluded (neither: cancellations, the caller's bad input, a node shedding
// load or not serving the configured model (taken out of traffic instead), and deadlines that
// were the caller's — the call ran less than twice its expected completion plus 20ms), or a
// failure.
func classify(ctx context.Context, err error, el time.Duration, expected float64) error {
	if err == nil {
		return nil
	}
	if errors.Is(ctx.Err(), context.Canceled) || errors.Is(err, backend.ErrModelNotServed) {
		return fmt.Errorf("%w: %w", cluster.ErrExcluded, err)
	}
	switch status.Code(err) {
	case codes.Canceled, codes.InvalidArgument, codes.Aborted, codes.FailedPrecondition, codes.ResourceExhausted:
		return fmt.Errorf("%w: %w", cluster.ErrExcluded, err)
	case codes.DeadlineExceeded:
		if el.Seconds() < 2*expected+0.02 {
			return fmt.Errorf("%w: %w", cluster.ErrExcluded, err)
		}
	}
	return err
}

func inc(c prometheus.Counter) {
	if c != nil {
		c.Inc()
	}
}

func observe(o prometheus.Observer, v float64) {
	if o != nil {
		o.Observe(v)
	}
}
