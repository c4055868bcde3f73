package node

import (
	"context"
	"math"
	"strings"
	"sync"
	"testing"
	"time"

	"google.golang.org/genproto/googleapis/rpc/errdetails"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

// sharingFake charges prefixes as the real engine does: a prefix in the cache, or repeating an
// earlier group's of the same pass, is not computed again (scorer/model Engine.CostFeatures). Each
// pass takes truth's time for its work on a fake clock, and publishes its prefixes.
type sharingFake struct {
	*fakeEngine
	mu     sync.Mutex
	now    time.Time
	cached map[string]bool
}

func newSharingFake(truth costmodel.Coeffs) *sharingFake {
	f := newFake()
	f.started = nil
	f.maxTokens = 4000
	f.truth = truth
	f.prior = scorer.CostPrior{Coeffs: truth, Source: scorer.CostSourceProfile}
	return &sharingFake{fakeEngine: f, now: time.Unix(1e9, 0), cached: map[string]bool{}}
}

func (c *sharingFake) reusedLocked(groups []*scorer.Group) []int {
	seen := map[string]bool{}
	out := make([]int, len(groups))
	for i, g := range groups {
		k := string(runesToBytes(g.Prefix))
		if seen[k] || c.cached[k] {
			out[i] = len(g.Prefix)
		}
		seen[k] = true
	}
	return out
}

func (c *sharingFake) CostFeatures(groups []*scorer.Group) costmodel.Features {
	c.mu.Lock()
	defer c.mu.Unlock()
	var f costmodel.Features
	for i, r := range c.reusedLocked(groups) {
		f = f.Add(groups[i].Features(r))
	}
	return f
}

func (c *sharingFake) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	var st scorer.ForwardStats
	for i, r := range c.reusedLocked(groups) {
		g := groups[i]
		st.Features = st.Features.Add(g.Features(r))
		g.PrefixCached = c.cached[string(runesToBytes(g.Prefix))]
		g.PrefixReused = r
		g.Logits = make([]float32, len(g.Items))
		st.ItemTokens += g.ItemTokens()
		st.PrefixTokens += len(g.Prefix) - r
	}
	for _, g := range groups {
		c.cached[string(runesToBytes(g.Prefix))] = true
	}
	st.Duration = time.Duration(c.truth.Seconds(st.Features) * float64(time.Second))
	c.now = c.now.Add(st.Duration)
	c.fakeEngine.mu.Lock()
	c.passes = append(c.passes, len(groups))
	c.fakeEngine.mu.Unlock()
	return st, nil
}

func (c *sharingFake) clock() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// price is what g costs in a pass where its first reused prefix tokens are not computed.
func (c *sharingFake) price(g *scorer.Group, reused int) float64 {
	return c.truth.Seconds(g.Features(reused))
}

// TestComputeSecondsIsTheBatchsShareOfTheWork: in a merged pass, compute_seconds (what the
// proxy's per-node cost model learns from, against features that leave out a cached or shared
// prefix) must be the work this batch caused, not its share of the pass's tokens counting a
// prefix it did not compute.
func TestComputeSecondsIsTheBatchsShareOfTheWork(t *testing.T) {
	truth := costmodel.Coeffs{A: 0.01, C: 0.001}
	long := strings.Repeat("q", 999) // prefix "|"+q: 1000 tokens
	for _, tc := range []struct {
		name    string
		cached  bool     // long's prefix is in the prefix cache before the pass
		queries []string // one batch each, item "d", merged into one pass (merge_policy fill)
	}{
		{"a cached prefix merged with a short batch", true, []string{long, "c"}},
		{"two batches of one query: the first computes the prefix", false, []string{long, long}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newSharingFake(truth)
			if tc.cached {
				f.cached[string(runesToBytes(runes("|"+long)))] = true
			}
			s := newScheduler(100000, 10, true)
			s.now = f.clock
			var jobs []*job
			for _, q := range tc.queries {
				jobs = append(jobs, submitJob(t, s, f, context.Background(), q, "d"))
			}
			// What each batch costs in the pass, in queue order (a prefix already computed —
			// cached, or by an earlier batch of the pass — is not charged again).
			want := make([]float64, len(jobs))
			seen := map[string]bool{}
			for i, j := range jobs {
				k := string(runesToBytes(j.group.Prefix))
				r := 0
				if seen[k] || (tc.cached && k == string(runesToBytes(runes("|"+long)))) {
					r = len(j.group.Prefix)
				}
				seen[k] = true
				want[i] = f.price(j.group, r)
			}
			s.start(f, nil)
			defer s.stop()
			for i, j := range jobs {
				r := <-j.done
				if r.err != nil {
					t.Fatal(r.err)
				}
				if r.merged != len(jobs) {
					t.Fatalf("job %d ran in a pass of %d", i, r.merged)
				}
				if got := r.compute.Seconds(); math.Abs(got-want[i]) > 0.01*want[i]+1e-6 {
					t.Errorf("job %d (%q…): compute_seconds %.4f, want %.4f (its own work in the pass)", i, tc.queries[i][:1], got, want[i])
				}
			}
		})
	}
}

// TestMergeDelayOfABatchSharingThePassPrefix: two batches of one query merged into one pass. Run
// one after another, the second would have found the first's prefix (cache) and been answered
// when the merged pass ends: its merge delay is 0. The node reported it answered about a whole
// pass early, which the proxy adds to its measured latency (judged = elapsed − merge delay).
func TestMergeDelayOfABatchSharingThePassPrefix(t *testing.T) {
	truth := costmodel.Coeffs{A: 0.01, C: 0.001}
	long := strings.Repeat("q", 999)
	f := newSharingFake(truth)
	s := newScheduler(100000, 10, true)
	s.now = f.clock
	a := submitJob(t, s, f, context.Background(), long, "dd")
	b := submitJob(t, s, f, context.Background(), long, "ee")
	s.start(f, nil)
	defer s.stop()
	ra, rb := <-a.done, <-b.done
	if ra.err != nil || rb.err != nil || ra.merged != 2 {
		t.Fatalf("errs %v %v, merged %d", ra.err, rb.err, ra.merged)
	}
	wantA := ra.forward.Seconds() - f.price(a.group, 0)
	if got := ra.mergeDelay.Seconds(); math.Abs(got-wantA) > 1e-3 {
		t.Errorf("first batch: merge delay %.4f s, want %.4f s", got, wantA)
	}
	if got := rb.mergeDelay.Seconds(); math.Abs(got) > 1e-3 {
		t.Errorf("second batch: merge delay %.4f s, want 0 (in sequence it would have ended with the pass); pass %.4f s",
			got, rb.forward.Seconds())
	}
}

// TestBatchThatCannotMeetItsDeadlineBehindTheQueueIsRefusedAtOnce: a batch queued behind more
// work than its deadline leaves is refused when it arrives (the proxy retries it elsewhere while
// there is time), not after waiting out its whole deadline in the queue.
func TestBatchThatCannotMeetItsDeadlineBehindTheQueueIsRefusedAtOnce(t *testing.T) {
	f := newFake()
	f.secPerToken = 0.2 // the held pass ~2.2 s, each queued batch below ~1.4 s
	h, first := hold(t, testConfig(), f)
	defer func() { close(f.release); <-first }()
	x := goCall(ctxT(t), h, batch("x", "doc"))
	waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == 1 })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second) // alone it fits
	defer cancel()
	t0 := time.Now()
	_, err := h.client.ScoreBatch(ctx, batch("y", "doc"))
	el := time.Since(t0)
	l := h.n.sched.load()
	if status.Code(err) != codes.DeadlineExceeded || el > time.Second {
		t.Errorf("err %v after %v; want DEADLINE_EXCEEDED at once (%.1f s queued + %.1f s running ahead, 3 s deadline)",
			err, el.Round(time.Millisecond), l.QueuedCostSeconds, l.RunningCostSeconds)
	}
	go func() { <-x }()
}

// TestQueueFullSaysWhenTheBacklogClears: RESOURCE_EXHAUSTED for a full queue carries a RetryInfo
// of the node's backlog (queued + running cost), which the proxy holds the node busy for; without
// it the proxy holds it for the call's whole deadline (capped at 1 s).
func TestQueueFullSaysWhenTheBacklogClears(t *testing.T) {
	f := newFake()
	f.secPerToken = 0.02
	cfg := testConfig()
	cfg.MaxQueueBatches = 1
	h, first := hold(t, cfg, f)
	queued := goCall(ctxT(t), h, batch("q1", "doc"))
	waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == 1 })
	_, err := h.client.ScoreBatch(ctxT(t), batch("q2", "doc"))
	l := h.n.sched.load()
	backlog := l.QueuedCostSeconds + l.RunningCostSeconds
	var got time.Duration = -1
	for _, d := range status.Convert(err).Details() {
		if ri, ok := d.(*errdetails.RetryInfo); ok {
			got = ri.GetRetryDelay().AsDuration()
		}
	}
	if status.Code(err) != codes.ResourceExhausted || got < 0 || math.Abs(got.Seconds()-backlog) > 0.1*backlog+0.01 {
		t.Errorf("err %v, RetryInfo %v; want RESOURCE_EXHAUSTED with a delay of ≈ %.3f s (queued + running)", err, got, backlog)
	}
	close(f.release)
	for _, c := range []<-chan callResult{first, queued} {
		if r := <-c; r.err != nil {
			t.Error(r.err)
		}
	}
}

// TestOverrunningPassStillCountsAsRunningWork: a pass that runs past its estimate (a stall, a
// slow pass) is reported as running work by how far past it is, not as done: at 0 the proxy's
// view of the node's backlog showed it free while it was stuck.
func TestOverrunningPassStillCountsAsRunningWork(t *testing.T) {
	f := newFake()
	h, first := hold(t, testConfig(), f)
	h.n.sched.mu.Lock()
	est := h.n.sched.runEst
	h.n.sched.mu.Unlock()
	time.Sleep(secondsDur(est) + 80*time.Millisecond)
	if l := h.n.sched.load(); l.RunningCostSeconds < 0.05 {
		t.Errorf("a pass %.0f ms past its %.3f s estimate reported %.3f s of running work", 80.0, est, l.RunningCostSeconds)
	}
	close(f.release)
	if r := <-first; r.err != nil {
		t.Error(r.err)
	}
}
