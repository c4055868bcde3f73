package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"runtime/debug"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

// job is one ScoreBatch call's group waiting for (or in) a forward pass.
type job struct {
	ctx    context.Context
	group  *scorer.Group
	tokens int     // prefix + item tokens: its weight in a merged pass
	est    float64 // the cost model's estimate for the group alone at submit, seconds
	// floor is the least the group can cost in any pass: its items alone, its prefix taken as
	// cached or shared with another batch of the query (the submit-time deadline check).
	floor float64
	// seqEst is, once the job is taken into a pass, the estimated seconds from the pass's start
	// until the job would have been answered had the pass's jobs run one after another in queue
	// order: the baseline of its merge delay.
	seqEst float64
	// passEst is, once the job is taken into a pass, its own work in the pass as estimated: what
	// the pass's estimate grew by when it joined (a prefix cached or computed by an earlier job
	// of the pass not charged again). Its compute_seconds is the pass's time in that share.
	passEst  float64
	enqueued time.Time
	// order is the job's place in the queue: its arrival plus the work its caller projected
	// ahead of it (ScoreBatchRequest.queued_ahead_seconds); the queue is kept sorted by it.
	order time.Time
	done  chan passResult // buffered: the worker never blocks on a caller that has gone
}

// passResult is what the worker tells one job.
type passResult struct {
	err           error
	queueWait     time.Duration
	compute       time.Duration // the pass's time × this job's share of its tokens
	forward       time.Duration
	forwardTokens int
	merged        int
	// mergeDelay is how much later the job was answered than had the pass's jobs run one after
	// another in queue order (negative: earlier); 0 for a pass of one.
	mergeDelay time.Duration
}

// loadSnapshot is the scheduler's backlog, as reported in NodeLoad and /v1/status.
type loadSnapshot struct {
	QueuedCostSeconds  float64
	RunningCostSeconds float64
	QueuedBatches      int
	InflightBatches    int
	QueuedTokens       int
	TokensPerSecond    float64
}

// scheduler queues jobs and runs them on one worker goroutine, merging queued jobs FIFO into
// one Engine.Forward up to a token budget while merging pays (mergePays). Engine.Forward uses
// every core itself, so one pass at a time is the fastest schedule; merging amortises per-pass
// overhead under load.
type scheduler struct {
	maxBatchTokens int
	maxQueue       int
	mergeFill      bool // merge whatever fits maxBatchTokens (MergeFill), not only what pays
	m              *metrics
	log            *slog.Logger // nil: panics are not logged
	fault          *faults      // nil: no fault injection (Config.FaultInjection)
	now            func() time.Time

	mu           sync.Mutex
	eng          scorer.Engine // nil until start
	cost         *costModel    // nil until start: estimates use the engine's prior until then
	queue        []*job
	queuedCost   float64
	queuedTokens int
	closed       bool  // draining: no new admissions (admitted calls may still submit)
	stopped      bool  // worker stopped: nothing may be queued any more
	admitted     int   // calls admitted (tokenizing) that have not submitted or released yet
	broken       error // set when the engine panicked: no pass runs again

	onBroken  func(error) // called once, without s.mu, when the engine breaks; may be nil
	running   []*job
	runStart  time.Time
	runEst    float64
	runFeat   costmodel.Features // the running pass's work as estimated when it was taken
	tokPerSec float64            // EWMA of computed tokens per second of forward time
	changed   chan struct{}      // closed and replaced on every state change (broadcast)

	wake       chan struct{} // cap 1: work may be available
	stopCh     chan struct{}
	stopOnce   sync.Once
	workerDone chan struct{}
	baseCtx    context.Context // parent of every pass; cancelled by stop
	cancelBase context.CancelFunc
}

func newScheduler(maxBatchTokens, maxQueue int, mergeFill bool) *scheduler {
	ctx, cancel := context.WithCancel(context.Background())
	return &scheduler{
		maxBatchTokens: maxBatchTokens,
		mergeFill:      mergeFill,
		maxQueue:       maxQueue,
		now:            time.Now,
		changed:        make(chan struct{}),
		wake:           make(chan struct{}, 1),
		stopCh:         make(chan struct{}),
		workerDone:     make(chan struct{}),
		baseCtx:        ctx,
		cancelBase:     cancel,
	}
}

// start runs the worker over eng, pricing work with cost (nil: a model started from the
// engine's prior). Call once.
func (s *scheduler) start(eng scorer.Engine, cost *costModel) {
	if cost == nil {
		cost = newCostModel(calibration{}, eng.CostPrior())
	}
	s.mu.Lock()
	s.eng, s.cost = eng, cost
	s.mu.Unlock()
	go s.run(eng)
}

// costModel is the node's cost model; nil before start.
func (s *scheduler) costModel() *costModel {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.cost
}

// estimate prices the work of running groups in one pass now: the one estimate the deadline
// check, the reported load and the merge decision share.
func (s *scheduler) estimate(eng scorer.Engine, groups []*scorer.Group) (float64, costmodel.Features) {
	f := eng.CostFeatures(groups)
	return price(s.costModel(), eng, f), f
}

// estimateLocked is estimate with s.mu held.
func (s *scheduler) estimateLocked(eng scorer.Engine, groups []*scorer.Group) (float64, costmodel.Features) {
	f := eng.CostFeatures(groups)
	return price(s.cost, eng, f), f
}

// marginLocked is the cost model's margin (1 before start); s.mu must be held.
func (s *scheduler) marginLocked() float64 {
	if s.cost == nil {
		return 1
	}
	return s.cost.margin()
}

// price is f's seconds by the node's cost model c, or by the engine's prior before start (c nil;
// tests queue work before starting the worker).
func price(c *costModel, eng scorer.Engine, f costmodel.Features) float64 {
	if c == nil {
		return eng.CostPrior().Coeffs.Seconds(f)
	}
	return c.seconds(f)
}

// broadcastLocked wakes every waitIdle; s.mu must be held.
func (s *scheduler) broadcastLocked() {
	close(s.changed)
	s.changed = make(chan struct{})
}

func (s *scheduler) load() loadSnapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	run := s.runningExpectedLocked()
	return loadSnapshot{
		QueuedCostSeconds:  s.queuedCost + s.fault.reportedLoad(), // a test script's phantom backlog
		RunningCostSeconds: run,
		QueuedBatches:      len(s.queue),
		InflightBatches:    len(s.running),
		QueuedTokens:       s.queuedTokens,
		TokensPerSecond:    s.tokPerSec,
	}
}

var (
	errDraining  = status.Error(codes.Unavailable, "node is draining: not taking new batches")
	msgQueueFull = "queue full: %d batches waiting (max_queue_batches)"
)

// admit lets a call in before it spends work on tokenizing: UNAVAILABLE while draining,
// RESOURCE_EXHAUSTED when the queue (counting admitted calls still tokenizing) is full. An
// admitted call is in-flight work: a drain waits for it, and it may still submit after the drain
// began. It must end with exactly one submit or release.
func (s *scheduler) admit() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.broken != nil {
		return brokenStatus(s.broken)
	}
	if s.closed {
		return errDraining
	}
	if n := len(s.queue) + s.admitted; n >= s.maxQueue {
		return s.queueFullLocked(n)
	}
	s.admitted++
	return nil
}

// queueFullLocked is admit's RESOURCE_EXHAUSTED for n batches waiting, with a RetryInfo of the
// node's backlog: the queued and running cost it reports in NodeLoad, plus the calls still
// tokenizing at the queue's mean price. The proxy holds the node busy for it (shedHold); without
// one it held it for the refused call's whole deadline. s.mu must be held.
func (s *scheduler) queueFullLocked(n int) error {
	st := status.Newf(codes.ResourceExhausted, msgQueueFull, n)
	wait := s.queuedCost + s.runningExpectedLocked() + s.fault.reportedLoad()
	if len(s.queue) > 0 && s.admitted > 0 {
		wait += s.queuedCost / float64(len(s.queue)) * float64(s.admitted)
	}
	if !(wait >= 0) {
		return st.Err()
	}
	if d, err := st.WithDetails(&errdetails.RetryInfo{RetryDelay: durationpb.New(secondsDur(wait))}); err == nil {
		return d.Err()
	}
	return st.Err()
}

// runningExpectedLocked is how long the running pass is expected to take still (0 when none):
// its estimate less its time so far, or, past its estimate, how far past (a pass overrun by d
// needs about d more, as the proxy reads a late batch). What the node reports as running work:
// at 0, a stalled or slow pass would show the node as free. s.mu must be held.
func (s *scheduler) runningExpectedLocked() float64 {
	if len(s.running) == 0 {
		return 0
	}
	return math.Abs(s.runEst - s.now().Sub(s.runStart).Seconds())
}

// runningLeftLocked is the running pass's estimated seconds left (0 when none, or when it has
// run past its estimate): a lower bound, for the deadline check at submit. s.mu must be held.
func (s *scheduler) runningLeftLocked() float64 {
	if len(s.running) == 0 {
		return 0
	}
	return max(0, s.runEst-s.now().Sub(s.runStart).Seconds())
}

// release ends an admission that will not submit (bad input, nothing to score).
func (s *scheduler) release() {
	s.mu.Lock()
	s.admitted--
	s.broadcastLocked()
	s.mu.Unlock()
}

// submit queues g for an admitted caller whose ctx is given, ending its admission. It
// estimates on the caller's goroutine.
func (s *scheduler) submit(ctx context.Context, eng scorer.Engine, g *scorer.Group, order time.Time) (*job, error) {
	est := func() float64 {
		// A panic in the engine's cost features (the interceptor answers it INTERNAL) must end
		// the admission too: left counted, it kept every later drain waiting its whole timeout.
		priced := false
		defer func() {
			if !priced {
				s.release()
			}
		}()
		e, _ := s.estimate(eng, []*scorer.Group{g})
		priced = true
		return e
	}()
	j := &job{
		ctx:    ctx,
		group:  g,
		tokens: len(g.Prefix) + g.ItemTokens(),
		est:    est,
		done:   make(chan passResult, 1),
	}
	s.mu.Lock()
	s.admitted--
	if s.stopped || s.broken != nil {
		err := status.Error(codes.Unavailable, "node stopped before the batch ran")
		if s.broken != nil {
			err = brokenStatus(s.broken)
		}
		s.broadcastLocked()
		s.mu.Unlock()
		return nil, err
	}
	j.enqueued = s.now()
	j.order = order
	if order.IsZero() {
		j.order = j.enqueued
	}
	// Sorted by order, equal orders in submit order: a job goes behind every queued job whose
	// order is not later than its own.
	i := len(s.queue)
	for i > 0 && s.queue[i-1].order.After(j.order) {
		i--
	}
	// Behind the work ahead of it, even with every merge saving its fixed cost, it cannot finish
	// in time: refused now, while the caller still has time to try another node, not when its
	// deadline runs out in the queue. (next checks it again, priced then, when it runs.)
	// Its floor and the floors ahead (each less the fixed cost a merge saves) are a lower bound.
	j.floor = price(s.cost, eng, g.Features(len(g.Prefix)))
	if dl, ok := ctx.Deadline(); ok && j.floor > 0 {
		fixed := s.passCostLocked(eng)
		ahead := s.runningLeftLocked()
		for _, q := range s.queue[:i] {
			ahead += max(0, q.floor-fixed)
		}
		if j.enqueued.Add(secondsDur(ahead + j.floor)).After(dl) {
			s.broadcastLocked()
			s.mu.Unlock()
			return nil, status.Errorf(codes.DeadlineExceeded,
				"batch cannot finish before its deadline: at least %.3fs of compute behind %.3fs of work ahead, %.3fs left", j.floor, ahead, dl.Sub(j.enqueued).Seconds())
		}
	}
	s.queue = slices.Insert(s.queue, i, j)
	s.queuedCost += j.est
	s.queuedTokens += j.tokens
	s.broadcastLocked()
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
	return j, nil
}

// remove drops j from the queue if it has not started (its caller has gone).
func (s *scheduler) remove(j *job) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.queue {
		if q == j {
			last := len(s.queue) - 1
			copy(s.queue[i:], s.queue[i+1:])
			s.queue[last] = nil // the backing array must not keep a finished job's tokens alive
			s.queue = s.queue[:last]
			s.dequeuedLocked(j)
			s.broadcastLocked()
			return
		}
	}
}

// popLocked removes the queue's head; s.mu must be held.
func (s *scheduler) popLocked() {
	j := s.queue[0]
	s.queue[0] = nil // the backing array must not keep a finished job's tokens alive
	s.queue = s.queue[1:]
	s.dequeuedLocked(j)
}

// dequeuedLocked updates the queue totals after j left the queue; s.mu must be held.
func (s *scheduler) dequeuedLocked(j *job) {
	s.queuedCost -= j.est
	s.queuedTokens -= j.tokens
	if len(s.queue) == 0 { // no float drift on an empty queue
		s.queuedCost, s.queuedTokens = 0, 0
	}
}

// close stops taking new jobs (drain); queued and running work continues.
func (s *scheduler) close() {
	s.mu.Lock()
	s.closed = true
	s.broadcastLocked()
	s.mu.Unlock()
}

// waitIdle waits until nothing is admitted, queued or running, or ctx is done.
func (s *scheduler) waitIdle(ctx context.Context) error {
	for {
		s.mu.Lock()
		idle := len(s.queue) == 0 && len(s.running) == 0 && s.admitted == 0
		ch := s.changed
		s.mu.Unlock()
		if idle {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// stop ends the worker: a running pass is cancelled and queued jobs fail with UNAVAILABLE.
func (s *scheduler) stop() {
	s.stopOnce.Do(func() {
		s.mu.Lock()
		s.closed, s.stopped = true, true
		started := s.eng != nil
		s.mu.Unlock()
		close(s.stopCh)
		s.cancelBase()
		if started {
			<-s.workerDone
		}
		s.mu.Lock()
		left := s.queue
		s.queue = nil
		s.queuedCost, s.queuedTokens = 0, 0
		s.broadcastLocked()
		s.mu.Unlock()
		for _, j := range left {
			j.done <- passResult{err: status.Error(codes.Unavailable, "node stopped before the batch ran")}
		}
	})
}

func (s *scheduler) run(eng scorer.Engine) {
	defer close(s.workerDone)
	for {
		jobs := s.next(eng)
		if jobs == nil {
			return
		}
		if s.runPass(eng, jobs) {
			s.breakDown()
			return
		}
	}
}

// breakDown takes the node out of service after the engine panicked: the engine's state (its
// prefix cache above all) can no longer be trusted, so no pass runs again. onBroken reports it
// first, then the queued jobs fail with UNAVAILABLE (the proxy retries them elsewhere): a caller
// told the node is out of service finds its health and readiness already saying so.
func (s *scheduler) breakDown() {
	s.mu.Lock()
	err := s.broken
	left := s.queue
	s.queue = nil
	s.queuedCost, s.queuedTokens = 0, 0
	s.broadcastLocked()
	s.mu.Unlock()
	if s.onBroken != nil {
		s.onBroken(err)
	}
	for _, j := range left {
		j.done <- passResult{err: brokenStatus(err)}
	}
}

func brokenStatus(err error) error {
	return status.Errorf(codes.Unavailable, "node out of service: %v", err)
}

// next blocks until jobs can run and takes them: FIFO, dropping jobs whose caller has gone or
// that cannot meet their deadline, merging while the token budget holds. nil means stop.
func (s *scheduler) next(eng scorer.Engine) []*job {
	for {
		select {
		case <-s.stopCh:
			return nil
		default:
		}
		s.mu.Lock()
		var take, failed []*job
		var groups []*scorer.Group
		var failErr []error
		var earliest time.Time // earliest deadline among take; zero: none has one
		var passEst float64    // take's estimated seconds in one pass
		tokens := 0
		now := s.now()
		for len(s.queue) > 0 {
			j := s.queue[0]
			if err := j.ctx.Err(); err != nil {
				s.popLocked()
				failed, failErr = append(failed, j), append(failErr, err)
				continue
			}
			if len(take) > 0 && tokens+j.tokens > s.maxBatchTokens {
				break // FIFO: later jobs wait rather than overtake (and are checked when they run)
			}
			// Priced now, not at submit: a prefix cached since (by the pass before, for another
			// batch of the same query) or a cost model that learned since makes the submit price
			// stale. The queue's reported cost follows the new price.
			alone, _ := s.estimateLocked(eng, []*scorer.Group{j.group})
			if alone > 0 {
				s.queuedCost += alone - j.est
				j.est = alone
			}
			merged := alone
			if len(take) > 0 {
				merged, _ = s.estimateLocked(eng, append(groups, j.group))
			}
			// The soonest j can be answered is with this pass: alone when it heads it, merged
			// into it otherwise (where a prefix it shares with the pass is not paid again). Past
			// its deadline even then, it is doomed. Checked on the submit price, or on the price
			// alone for a job merged behind the same query, a batch the node could answer with
			// time to spare was refused.
			if dl, ok := j.ctx.Deadline(); ok && merged > 0 && now.Add(secondsDur(merged)).After(dl) {
				s.popLocked()
				failed = append(failed, j)
				failErr = append(failErr, status.Errorf(codes.DeadlineExceeded,
					"batch cannot finish before its deadline: estimated %.3fs of compute, %.3fs left", merged, dl.Sub(now).Seconds()))
				continue
			}
			if len(take) > 0 && !s.mergeFill && !mergePays(passEst, alone, merged, s.passCostLocked(eng), len(take), len(s.queue)) {
				break
			}
			// Merging lengthens the pass for every job already taken: stop before the merged
			// pass would make one of them miss a deadline it could meet alone — with the cost
			// model's own error as a margin, since a merge that ends just in time on paper
			// misses about half the time. (j itself gains: left out, it would wait for this
			// whole pass and then run.)
			if len(take) > 0 && !earliest.IsZero() && now.Add(secondsDur(merged*s.marginLocked())).After(earliest) {
				break
			}
			if dl, ok := j.ctx.Deadline(); ok && (earliest.IsZero() || dl.Before(earliest)) {
				earliest = dl
			}
			// In queue order one after another, j would have run after the pass so far and
			// cost what it adds to it: a prefix an earlier job computed would be found cached.
			j.passEst = merged - passEst
			j.seqEst = merged
			passEst = merged
			take = append(take, j)
			groups = append(groups, j.group)
			tokens += j.tokens
			s.popLocked()
		}
		if len(take) > 0 {
			s.running = take
			s.runStart = now
			s.runEst, s.runFeat = s.estimateLocked(eng, groups)
		}
		if len(failed) > 0 || len(take) > 0 {
			s.broadcastLocked()
		}
		s.mu.Unlock()
		for i, j := range failed {
			err := failErr[i]
			if _, ok := status.FromError(err); !ok || errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
				err = status.FromContextError(err).Err()
			}
			j.done <- passResult{err: err, queueWait: now.Sub(j.enqueued)}
		}
		if len(take) > 0 {
			return take
		}
		select {
		case <-s.wake:
		case <-s.stopCh:
			return nil
		}
	}
}

// mergePays reports whether adding a queued job to the pass being assembled answers the queue
// sooner on the whole. pass is the estimate of the n jobs taken, alone the job's own, merged
// theirs together and fixed what one pass costs however much it does. Merged, the pass really
// takes merged − fixed (the cost model charges its fixed term c to every batch; one pass of two
// streams the weights once), so the merge saves pass + alone − (merged − fixed) — that fixed
// cost, and any prefix the job shares with the pass — for the job and for every job queued behind
// it (queued counts the job and those behind it), and answers each of the n jobs taken
// (merged − fixed) − pass later. It merges when the first outweighs the second: the sum of the
// queue's completion times falls.
//
// Merging whatever fits the token budget, as before, made an idle node's big batches wait for
// each other: on `make run`'s cluster three queued batches of ~1.5 s merged into one 4.5 s pass
// to save ~2 × 6 ms, answering the first two 3 and 1.5 s late. The proxy projects each batch as
// run alone, in queue order, so such merges also showed as projection error, which admission's
// margin then charged to every request. Under load the queue is long and small batches still
// merge: the fixed cost saved for the whole queue is then worth the delay.
func mergePays(pass, alone, merged, fixed float64, n, queued int) bool {
	merged -= fixed
	saved, later := pass+alone-merged, merged-pass
	return saved*float64(queued) >= later*float64(n)
}

// passCostLocked is a pass's fixed cost by the node's cost model (its per-batch term c; the
// engine's prior before start); s.mu must be held.
func (s *scheduler) passCostLocked(eng scorer.Engine) float64 {
	if s.cost == nil {
		return eng.CostPrior().Coeffs.C
	}
	return s.cost.snap.Load().Coeffs.C // not snapshot(): no copy of the whole state per queued job
}

// runPass runs one forward pass over jobs and replies to each. It reports whether the engine
// panicked (s.broken is then set).
func (s *scheduler) runPass(eng scorer.Engine, jobs []*job) (panicked bool) {
	ctx, cancel := context.WithCancel(s.baseCtx)
	defer cancel()
	// Cancel the pass once every caller in it has gone: no work for nobody.
	var live atomic.Int32
	live.Store(int32(len(jobs)))
	stops := make([]func() bool, len(jobs))
	groups := make([]*scorer.Group, len(jobs))
	for i, j := range jobs {
		groups[i] = j.group
		stops[i] = context.AfterFunc(j.ctx, func() {
			if live.Add(-1) == 0 {
				cancel()
			}
		})
	}
	start := s.now()
	st, err := s.faultyForward(ctx, eng, groups)
	var pe *enginePanic
	panicked = errors.As(err, &pe)
	dur := s.now().Sub(start)
	for _, stop := range stops {
		stop()
	}
	if st.Duration <= 0 {
		st.Duration = dur
	}

	total := 0
	for _, j := range jobs {
		total += j.tokens
	}
	computed := st.PrefixTokens + st.ItemTokens
	if computed == 0 {
		computed = total
	}
	if s.m != nil {
		s.m.observePass(st, len(jobs), dur.Seconds())
	}

	s.mu.Lock()
	est, feat, cost := s.runEst, s.runFeat, s.cost
	s.mu.Unlock()
	if err == nil && cost != nil {
		// One pass is one observation, merged or not: its work is the sum of its groups'.
		if st.Features != (costmodel.Features{}) {
			feat = st.Features
		}
		if y := passSeconds(st, dur); y > 0 {
			if s.m != nil && est > 0 {
				s.m.estimateRatio.Observe(est / y)
			}
			cost.observe(feat, y, est)
		}
	}

	s.mu.Lock()
	s.running = nil
	if panicked {
		s.broken = err
	}
	if err == nil && dur > 0 {
		const alpha = 0.3
		tps := float64(computed) / dur.Seconds()
		if s.tokPerSec == 0 {
			s.tokPerSec = tps
		} else {
			s.tokPerSec = alpha*tps + (1-alpha)*s.tokPerSec
		}
	}
	s.broadcastLocked()
	s.mu.Unlock()

	for _, j := range jobs {
		r := passResult{
			queueWait:     start.Sub(j.enqueued),
			forward:       dur,
			forwardTokens: computed,
			merged:        len(jobs),
		}
		if len(jobs) > 1 && est > 0 {
			// The pass's time shared out as estimated: the job would have been answered after
			// its share of everything up to it in queue order.
			r.mergeDelay = dur - shareOf(dur, j.seqEst/est)
		}
		switch {
		case err == nil:
			switch {
			case est > 0:
				// Its share of the pass's work as priced (what the proxy learns from, against
				// features that leave out a prefix cached or computed by another job).
				r.compute = shareOf(dur, j.passEst/est)
			case total > 0:
				r.compute = shareOf(dur, float64(j.tokens)/float64(total))
			}
		case j.ctx.Err() != nil:
			r.err = status.FromContextError(j.ctx.Err()).Err()
		case s.baseCtx.Err() != nil:
			r.err = status.Error(codes.Unavailable, "node stopped during the forward pass")
		default:
			r.err = status.Error(codes.Internal, fmt.Sprintf("forward pass: %v", err))
		}
		j.done <- r
	}
	return panicked
}

// shareOf is the share frac of d, rounded to the nearest nanosecond. Computed as d×a/b and
// truncated, a lone batch's share of its pass (a = b) came out 1 ns short of the pass for some
// pass lengths; frac is taken first (exactly 1 then) and the product rounded, not truncated.
func shareOf(d time.Duration, frac float64) time.Duration {
	return time.Duration(math.Round(float64(d) * frac))
}

// forward runs eng.Forward, turning a panic into an error: the worker is the only goroutine
// that runs passes, and an engine bug must fail this pass's callers, not kill the node.
func (s *scheduler) forward(ctx context.Context, eng scorer.Engine, groups []*scorer.Group) (st scorer.ForwardStats, err error) {
	defer func() {
		if p := recover(); p != nil {
			if s.log != nil {
				s.log.Error("engine panicked in Forward", "panic", p, "stack", string(debug.Stack()))
			}
			st, err = scorer.ForwardStats{}, &enginePanic{p}
		}
	}()
	return eng.Forward(ctx, groups)
}

// enginePanic is a panic recovered from Engine.Forward.
type enginePanic struct{ v any }

func (e *enginePanic) Error() string { return fmt.Sprintf("engine panicked: %v", e.v) }

// secondsDur converts an estimate in seconds to a Duration, saturating instead of overflowing.
func secondsDur(sec float64) time.Duration {
	if !(sec < float64(math.MaxInt64)/float64(time.Second)) {
		return math.MaxInt64
	}
	return time.Duration(sec * float64(time.Second))
}
