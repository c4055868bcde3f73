package node

import (
	"context"
	"fmt"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

// TestMergeKeepsEarlierDeadlines: merging a queued batch into the head's pass must not make the
// head miss a deadline it meets alone.
func TestMergeKeepsEarlierDeadlines(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration // head's deadline from now; 0: none
		want     []int         // groups per pass
	}{
		{"no deadline merges", 0, []int{2}},
		{"loose deadline merges", 3 * time.Hour, []int{2}},
		{"merge would miss the head's deadline", 100 * time.Minute, []int{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.started = nil
			// Each batch below is 6 tokens: an hour alone; merged, 1.5 h and 1 h more (the
			// model's c is charged per batch, a pass pays it once), so the merge pays.
			f.secPerToken, f.passCost = 300, 1800
			s := newScheduler(1000, 10, false)
			t0 := time.Now()
			s.now = func() time.Time { return t0 }
			ctxA, cancel := context.WithCancel(context.Background())
			if tc.deadline > 0 {
				ctxA, cancel = context.WithDeadline(context.Background(), t0.Add(tc.deadline))
			}
			defer cancel()
			jobs := submitJobs(t, s, f, ctxA, context.Background())
			s.start(f, nil)
			defer s.stop()
			checkPasses(t, jobs, f, tc.want)
		})
	}
}

// TestMergeOnlyWhenItAnswersTheQueueSooner: a queued batch joins the pass being assembled only
// when the pass's fixed cost it saves, for itself and every batch queued behind it, outweighs
// how much later it answers the batches already taken. Big batches on a short queue run one by
// one (merging three of ~1.5 s to save a few ms made the first two 3 and 1.5 s late); a fixed
// cost that dominates merges everything; a long queue merges what a short one would not.
func TestMergeOnlyWhenItAnswersTheQueueSooner(t *testing.T) {
	for _, tc := range []struct {
		name string
		cost costmodel.Coeffs // each batch below is 6 tokens
		jobs int
		fill bool  // merge_policy: fill
		want []int // groups per pass
	}{
		{"batches long against the fixed cost", costmodel.Coeffs{A: 0.25, C: 0.006}, 3, false, []int{1, 1, 1}},
		{"fill merges whatever fits", costmodel.Coeffs{A: 0.25, C: 0.006}, 3, true, []int{3}},
		{"fixed cost dominates", costmodel.Coeffs{A: 0.001, C: 0.05}, 3, false, []int{3}},
		// 0.085 s alone, 0.06 s more merged: the first pass takes 3 while 7, 6 and then 5
		// wait, the next 2 of 5; then 3 and fewer queued save too little.
		{"a long queue merges what a short one would not", costmodel.Coeffs{A: 0.01, C: 0.025}, 8, false, []int{3, 2, 1, 1, 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.started = nil
			// The fake reports the model's own time for each pass, so the node's learned
			// model stays where it started.
			f.prior = scorer.CostPrior{Coeffs: tc.cost, Source: scorer.CostSourceProfile}
			f.truth = tc.cost
			s := newScheduler(1000, 10, tc.fill)
			ctxs := make([]context.Context, tc.jobs)
			for i := range ctxs {
				ctxs[i] = context.Background()
			}
			jobs := submitJobs(t, s, f, ctxs...)
			s.start(f, nil)
			defer s.stop()
			checkPasses(t, jobs, f, tc.want)
		})
	}
}

// TestQueueKeepsNoFinishedJobs: the queue's backing array holds no references to jobs that left
// it (each holds a batch's tokens and its caller's context).
func TestQueueKeepsNoFinishedJobs(t *testing.T) {
	f := newFake()
	f.started = nil
	s := newScheduler(1000, 10, false)
	var jobs []*job
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		g, _ := f.Tokenize("", string(rune('a'+i)), []string{"doc"}, scorer.TokenizeOptions{})
		if err := s.admit(); err != nil {
			t.Fatal(err)
		}
		c := context.Background()
		if i == 1 {
			c = ctx
		}
		j, err := s.submit(c, f, g, time.Time{})
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	s.remove(jobs[1]) // a caller that left while queued
	s.start(f, nil)
	defer s.stop()
	for i, j := range jobs {
		if i == 1 {
			continue
		}
		if r := <-j.done; r.err != nil {
			t.Fatal(r.err)
		}
	}
	waitSched(t, s, "idle", func(l loadSnapshot) bool { return l.InflightBatches == 0 })
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.queue[:cap(s.queue)] {
		if q != nil {
			t.Errorf("queue backing array slot %d still holds a job", i)
		}
	}
}

// clockedFake is a fake engine on a fake clock: each pass moves the clock by the pass's
// duration (the fake's truth), so that a pass's wall time is known exactly.
type clockedFake struct {
	*fakeEngine
	mu  sync.Mutex
	now time.Time
}

func (c *clockedFake) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	st, err := c.fakeEngine.Forward(ctx, groups)
	c.mu.Lock()
	c.now = c.now.Add(st.Duration)
	c.mu.Unlock()
	return st, err
}

func (c *clockedFake) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// TestMergeDelayIsAgainstRunningInQueueOrder: each job of a merged pass reports how much later
// it was answered than had the pass's jobs run one after another in queue order — what the
// proxy takes out of its projections' error, since its plan projects each batch alone.
func TestMergeDelayIsAgainstRunningInQueueOrder(t *testing.T) {
	truth := costmodel.Coeffs{A: 0.01, C: 0.2} // each job below: 6 tokens, 0.26 s alone
	f := &clockedFake{fakeEngine: newFake(), now: time.Unix(1e9, 0)}
	f.started = nil
	f.truth = truth
	f.prior = scorer.CostPrior{Coeffs: truth, Source: scorer.CostSourceProfile}
	s := newScheduler(1000, 10, false)
	s.now = f.clock
	ctx := context.Background()
	jobs := submitJobs(t, s, f, ctx, ctx, ctx)
	s.start(f, nil)
	defer s.stop()
	// One pass of 0.78 s (the fake charges c per batch: its truth is the model's); alone, in
	// order, they would have been answered at 0.26, 0.52 and 0.78 s.
	want := []float64{0.52, 0.26, 0}
	for i, j := range jobs {
		r := <-j.done
		if r.err != nil {
			t.Fatalf("job %d: %v", i, r.err)
		}
		if r.merged != 3 {
			t.Fatalf("job %d ran in a pass of %d jobs, want 3", i, r.merged)
		}
		if got := r.mergeDelay.Seconds(); math.Abs(got-want[i]) > 1e-6 {
			t.Errorf("job %d: merge delay %.6f s, want %.2f s", i, got, want[i])
		}
	}
}

// TestMergeDelayIsZeroAlone: a job that ran in a pass of its own was delayed by no merge.
func TestMergeDelayIsZeroAlone(t *testing.T) {
	truth := costmodel.Coeffs{A: 0.01, C: 0.05}
	f := &clockedFake{fakeEngine: newFake(), now: time.Unix(1e9, 0)}
	f.started = nil
	f.truth = truth
	f.prior = scorer.CostPrior{Coeffs: truth, Source: scorer.CostSourceProfile}
	s := newScheduler(1000, 10, false)
	s.now = f.clock
	s.start(f, nil)
	defer s.stop()
	g, _ := f.Tokenize("", "a", []string{"dd"}, scorer.TokenizeOptions{})
	if err := s.admit(); err != nil {
		t.Fatal(err)
	}
	j, err := s.submit(context.Background(), f, g, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	r := <-j.done
	if r.err != nil || r.merged != 1 || r.mergeDelay != 0 {
		t.Fatalf("alone: err %v, merged %d, merge delay %v; want nil, 1, 0", r.err, r.merged, r.mergeDelay)
	}
}

// TestMergeLeavesTheCostModelsErrorAsMargin: a merge that ends before the head's deadline on
// the estimate, but not once the estimate is stretched by the cost model's measured error, is
// not made: it would miss that deadline about as often as the estimate is short.
func TestMergeLeavesTheCostModelsErrorAsMargin(t *testing.T) {
	for _, tc := range []struct {
		margin float64
		want   []int // groups per pass
	}{
		{1, []int{2}},      // 2 h merged by the estimate, deadline 2.5 h: merges
		{1.5, []int{1, 1}}, // 3 h with the margin: runs the head alone
	} {
		t.Run(fmt.Sprintf("margin %.1f", tc.margin), func(t *testing.T) {
			f := newFake()
			f.started = nil
			// Each batch below is 6 tokens: an hour alone, two hours merged by the estimate
			// (which charges c per batch) and 1.5 h by the fixed cost the merge saves.
			cost := newCostModel(calibration{}, scorer.CostPrior{Coeffs: costmodel.Coeffs{A: 300, C: 1800}, Source: scorer.CostSourceProfile})
			snap := cost.snapshot()
			snap.Margin = tc.margin
			cost.snap.Store(&snap)
			s := newScheduler(1000, 10, false)
			t0 := time.Now()
			s.now = func() time.Time { return t0 }
			ctxA, cancel := context.WithDeadline(context.Background(), t0.Add(150*time.Minute))
			defer cancel()
			jobs := submitJobs(t, s, f, ctxA, context.Background())
			s.start(f, cost)
			defer s.stop()
			checkPasses(t, jobs, f, tc.want)
		})
	}
}

// TestCostModelMarginIsItsHighError: the margin is the 95th percentile of measured ÷ estimated
// pass seconds, never below 1 (an estimate that runs long is the risk; one that runs short is
// not a reason to merge past a deadline) nor above 2, and 1 until enough passes were measured.
func TestCostModelMarginIsItsHighError(t *testing.T) {
	f := costmodel.Features{Tokens: 100, Batches: 1}
	m := newCostModel(calibration{}, scorer.CostPrior{Coeffs: costmodel.Coeffs{A: 1e-3}, Source: scorer.CostSourceProfile})
	for i := range marginMinPasses - 1 {
		m.observe(f, 0.1*(1+0.05*float64(i%3)), 0.1)
	}
	if got := m.margin(); got != 1 {
		t.Fatalf("margin after %d passes = %v, want 1 (too few passes)", marginMinPasses-1, got)
	}
	// 20 passes in all: 19 measured 1.0–1.1 × the estimate, one 1.3 ×: the 95th percentile is
	// the 19th of 20, 1.1.
	for range 20 - (marginMinPasses - 1) - 1 {
		m.observe(f, 0.1, 0.1)
	}
	m.observe(f, 0.13, 0.1)
	if got := m.margin(); math.Abs(got-1.1) > 1e-9 {
		t.Errorf("margin = %v, want 1.1", got)
	}
	for range 64 {
		m.observe(f, 0.05, 0.1)
	}
	if got := m.margin(); got != 1 {
		t.Errorf("margin of a model that overestimates = %v, want 1", got)
	}
	for range 64 {
		m.observe(f, 0.5, 0.1)
	}
	if got := m.margin(); got != 2 {
		t.Errorf("margin of a model 5× short = %v, want 2 (the cap)", got)
	}
}

// submitJobs queues one job per context on s, in order: job i has query "a"+i and one item "dd"
// (6 tokens with the fake's template).
// checkPasses waits for every job and compares the groups per pass the fake engine ran with want.
func checkPasses(t *testing.T, jobs []*job, f *fakeEngine, want []int) {
	t.Helper()
	for i, j := range jobs {
		if r := <-j.done; r.err != nil {
			t.Errorf("job %d: %v", i, r.err)
		}
	}
	if diff := cmp.Diff(want, f.passCounts()); diff != "" {
		t.Errorf("groups per pass (-want +got):\n%s", diff)
	}
}

func submitJobs(t *testing.T, s *scheduler, eng scorer.Engine, ctxs ...context.Context) []*job {
	t.Helper()
	var jobs []*job
	for i, ctx := range ctxs {
		jobs = append(jobs, submitJob(t, s, eng, ctx, string(rune('a'+i)), "dd"))
	}
	return jobs
}

// submitJob admits and queues one batch of query and doc under ctx.
func submitJob(t *testing.T, s *scheduler, eng scorer.Engine, ctx context.Context, query, doc string) *job {
	t.Helper()
	g, err := eng.Tokenize("", query, []string{doc}, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.admit(); err != nil {
		t.Fatal(err)
	}
	j, err := s.submit(ctx, eng, g, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	return j
}

// cachingFake is fakeEngine with a prefix cache: a prefix computed by a pass is not charged
// again (as the real and emulated engines' CostFeatures do).
type cachingFake struct {
	*fakeEngine
	mu     sync.Mutex
	cached map[string]bool
}

func (c *cachingFake) CostFeatures(groups []*scorer.Group) costmodel.Features {
	c.mu.Lock()
	defer c.mu.Unlock()
	var f costmodel.Features
	for _, g := range groups {
		reused := 0
		if c.cached[string(runesToBytes(g.Prefix))] {
			reused = len(g.Prefix)
		}
		f = f.Add(g.Features(reused))
	}
	return f
}

func (c *cachingFake) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	st, err := c.fakeEngine.Forward(ctx, groups)
	if err == nil {
		c.mu.Lock()
		for _, g := range groups {
			c.cached[string(runesToBytes(g.Prefix))] = true
		}
		c.mu.Unlock()
	}
	return st, err
}

func runesToBytes(p []int32) []byte {
	var b []byte
	for _, r := range p {
		b = append(b, byte(r), byte(r>>8), byte(r>>16), byte(r>>24))
	}
	return b
}

// TestDeadlineCheckPricesTheBatchWhenItRuns: two batches of one request (same query, so the same
// prefix) are queued and do not merge; the first pass caches the prefix. The second then costs
// its items only (0.03 s) and has 3 s left: it runs. Priced as at submit, prefix included (10 s),
// it was refused with DEADLINE_EXCEEDED.
func TestDeadlineCheckPricesTheBatchWhenItRuns(t *testing.T) {
	inner := newFake()
	inner.started = nil
	inner.maxTokens = 4000
	cost := costmodel.Coeffs{A: 0.01, C: 1e-6}
	inner.prior = scorer.CostPrior{Coeffs: cost, Source: scorer.CostSourceProfile}
	inner.truth = cost
	f := &cachingFake{fakeEngine: inner, cached: map[string]bool{}}
	s := newScheduler(1100, 10, false) // a batch is ~1003 tokens: two never merge
	q := strings.Repeat("q", 999)
	var jobs []*job
	ctxB, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	for _, ctx := range []context.Context{context.Background(), ctxB} {
		jobs = append(jobs, submitJob(t, s, f, ctx, q, "d"))
	}
	t.Logf("estimates at submit: %.3f s, %.3f s", jobs[0].est, jobs[1].est)
	s.start(f, nil)
	defer s.stop()
	if r := <-jobs[0].done; r.err != nil {
		t.Fatalf("first batch: %v", r.err)
	}
	alone, _ := s.estimate(f, []*scorer.Group{jobs[1].group})
	if r := <-jobs[1].done; r.err != nil {
		t.Errorf("second batch, %.3f s of work now, 3 s left: %v", alone, r.err)
	}
}

// panickyCost is fakeEngine whose cost features panic on a query ending in "!".
type panickyCost struct{ *fakeEngine }

func (p panickyCost) CostFeatures(groups []*scorer.Group) costmodel.Features {
	for _, g := range groups {
		if len(g.Prefix) > 0 && g.Prefix[len(g.Prefix)-1] == '!' {
			panic("cost features bug")
		}
	}
	return p.fakeEngine.CostFeatures(groups)
}

// TestPanicPricingABatchEndsItsAdmission: a panic in the engine's cost features while a batch is
// queued (the interceptor answers INTERNAL) ends the call's admission: the node drains at once
// afterwards instead of waiting its whole drain timeout for a call that ended.
func TestPanicPricingABatchEndsItsAdmission(t *testing.T) {
	f := newFake()
	f.started = nil
	h := start(t, testConfig(), loadEngine(panickyCost{f}), true)
	if _, err := h.client.ScoreBatch(ctxT(t), batch("q!", "doc")); err == nil {
		t.Fatal("want an error")
	}
	h.n.sched.mu.Lock()
	adm := h.n.sched.admitted
	h.n.sched.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 500*time.Millisecond)
	defer cancel()
	if err := h.n.Drain(ctx); err != nil || adm != 0 {
		t.Errorf("admitted = %d after the call ended; Drain: %v", adm, err)
	}
}

// steppedFake is fakeEngine on a fake clock whose k-th pass takes step·(k+1) plus base.
type steppedFake struct {
	*fakeEngine
	base, step time.Duration
	mu         sync.Mutex
	passes     int
	now        time.Time
}

func (c *steppedFake) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	st, err := c.fakeEngine.Forward(ctx, groups)
	c.mu.Lock()
	c.passes++
	d := c.base + time.Duration(c.passes)*c.step
	c.now = c.now.Add(d)
	c.mu.Unlock()
	st.Duration = d
	return st, err
}

func (c *steppedFake) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// TestLoneBatchComputeIsTheWholePass: a batch that ran in a pass of its own did all of its work:
// its compute_seconds is the pass's forward_seconds to the nanosecond, whatever the pass took.
// (Shared out as dur × passEst ÷ est and truncated to a Duration, it came out 1 ns short for
// about half of all pass lengths: the proxy saw a lone batch computing less than its pass, and
// TestScoreBatchOrderAndStats failed intermittently.)
func TestLoneBatchComputeIsTheWholePass(t *testing.T) {
	f := &steppedFake{fakeEngine: newFake(), base: 31 * time.Millisecond, step: 7919, now: time.Unix(1e9, 0)}
	f.started = nil
	s := newScheduler(1000, 10, false)
	s.now = f.clock
	s.start(f, nil)
	defer s.stop()
	short := 0
	for i := range 200 {
		j := submitJob(t, s, f, context.Background(), "q", strings.Repeat("d", 1+i%7))
		r := <-j.done
		if r.err != nil {
			t.Fatalf("pass %d: %v", i, r.err)
		}
		if r.merged != 1 {
			t.Fatalf("pass %d merged %d batches, want 1", i, r.merged)
		}
		if r.compute != r.forward {
			if short == 0 {
				t.Errorf("pass %d: a lone batch's compute %v, its pass's forward %v", i, r.compute, r.forward)
			}
			short++
		}
	}
	if short > 0 {
		t.Errorf("%d of 200 lone batches reported less compute than their pass", short)
	}
}
