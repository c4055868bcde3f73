// Package load runs a load test against a relevance proxy (or any server speaking its HTTP or
// gRPC API) and measures latency with HDR histograms.
//
// Two disciplines:
//
//   - Open loop (Config.Rate > 0): arrivals follow a Poisson process fixed in advance from the
//     seed. Every request has an intended send time and its latency is measured from that time,
//     not from when it was actually sent, so a slow server cannot hide its queueing behind a
//     slowed-down client (coordinated omission). The schedule never waits for the server: when
//     Config.MaxInFlight requests are outstanding, a due request is counted as an "overflow"
//     error instead of being sent late.
//   - Closed loop (Config.Concurrency > 0): N workers each send the next request as soon as the
//     previous one returns, as wrk does; latency is from the actual send.
//
// Run is safe to call concurrently with other Runs; a Config must not be shared while running.
package load

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"

	"github.com/relevance-scoring/relevance/bench/workload"
)

// Config is one load test.
type Config struct {
	Target Target
	Trace  *workload.Trace
	// Rate is the open-loop arrival rate in requests per second; 0 selects closed loop.
	Rate float64
	// Concurrency is the closed-loop worker count (used when Rate is 0).
	Concurrency int
	// MaxInFlight caps outstanding open-loop requests; 0 means 1000.
	MaxInFlight int
	// Duration is how long requests are issued, warm-up included.
	Duration time.Duration
	// Warmup is the initial part of Duration whose requests are sent but not measured.
	Warmup time.Duration
	// Timeout bounds each request; 0 means 30 s.
	Timeout time.Duration
	// SLO is the latency goodput is counted within; 0 means 500 ms.
	SLO time.Duration
	// Seed fixes the arrival schedule (the trace has its own seed).
	Seed uint64
	// Overflow, when set, is called with each open-loop request not sent because MaxInFlight
	// were outstanding (warm-up included), so that a caller recording calls at its Target sees
	// those too.
	Overflow func(Prepared)
	// Progress, when set, is called about twice a second from one goroutine.
	Progress func(Progress)
	// NodesURL, when set, is polled (GET, JSON) every NodesEvery for per-node load.
	NodesURL   string
	NodesEvery time.Duration
}

// Progress is a live snapshot.
type Progress struct {
	Elapsed, Duration time.Duration
	Sent, OK, Errors  int64
	InFlight          int64
	// P50 and P99 over the last second.
	P50, P99 time.Duration
}

// sample is one measured request.
type sample struct {
	at      time.Duration // intended send time since start
	latency time.Duration
	items   int
	kind    string // "" when OK
}

// Run executes the load test and returns its result. It returns early with an error only for
// a bad config; request failures are counted in the result.
func Run(ctx context.Context, cfg Config) (*Result, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	// Encode the distinct requests before the clock starts.
	n := cfg.Trace.Len()
	prepared := make([]Prepared, n)
	for i := range n {
		p, err := cfg.Target.Prepare(cfg.Trace.At(i))
		if err != nil {
			return nil, fmt.Errorf("prepare request %d: %w", i, err)
		}
		prepared[i] = p
	}

	r := &recorder{}
	r.init()
	start := time.Now()
	var poller *nodePoller
	if cfg.NodesURL != "" {
		poller = startNodePoller(ctx, cfg.NodesURL, cfg.NodesEvery, start)
	}
	stopProgress := startProgress(ctx, cfg, r, start)

	if cfg.Rate > 0 {
		runOpen(ctx, cfg, prepared, r, start)
	} else {
		runClosed(ctx, cfg, prepared, r, start)
	}
	end := time.Now()
	stopProgress()
	var nodes []NodeSample
	if poller != nil {
		nodes = poller.stop()
	}
	res := r.result(cfg, start, end, nodes)
	for _, n := range nodes {
		res.Emulated = res.Emulated || n.Emulated
	}
	return res, nil
}

func (cfg *Config) validate() error {
	switch {
	case cfg.Target == nil:
		return errors.New("load: no target")
	case cfg.Trace == nil || cfg.Trace.Len() == 0:
		return errors.New("load: empty trace")
	case cfg.Rate < 0 || math.IsNaN(cfg.Rate) || math.IsInf(cfg.Rate, 0):
		return fmt.Errorf("load: --rate must be a finite value ≥ 0, got %v", cfg.Rate)
	case cfg.Rate == 0 && cfg.Concurrency <= 0:
		return fmt.Errorf("load: set --rate (open loop) or --concurrency > 0 (closed loop), got rate 0 and concurrency %d", cfg.Concurrency)
	case cfg.Duration <= 0:
		return fmt.Errorf("load: --duration must be > 0, got %v", cfg.Duration)
	case cfg.Warmup < 0 || cfg.Warmup >= cfg.Duration:
		return fmt.Errorf("load: --warmup must be in [0, duration %v), got %v", cfg.Duration, cfg.Warmup)
	case cfg.MaxInFlight < 0:
		return fmt.Errorf("load: --max-inflight must be ≥ 0, got %d", cfg.MaxInFlight)
	case cfg.Timeout < 0 || cfg.SLO < 0:
		return errors.New("load: --timeout and --slo must be ≥ 0")
	}
	if cfg.MaxInFlight == 0 {
		cfg.MaxInFlight = 1000
	}
	if cfg.Timeout == 0 {
		cfg.Timeout = 30 * time.Second
	}
	if cfg.SLO == 0 {
		cfg.SLO = 500 * time.Millisecond
	}
	if cfg.NodesEvery <= 0 {
		cfg.NodesEvery = 500 * time.Millisecond
	}
	return nil
}

// Schedule returns the intended send times (since start) of an open-loop run: Poisson arrivals
// at rate per second over d, from seed.
func Schedule(rate float64, d time.Duration, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	var out []time.Duration
	t := 0.0
	for {
		t += rng.ExpFloat64() / rate
		at := time.Duration(t * float64(time.Second))
		if at >= d {
			return out
		}
		out = append(out, at)
	}
}

func runOpen(ctx context.Context, cfg Config, prepared []Prepared, r *recorder, start time.Time) {
	sched := Schedule(cfg.Rate, cfg.Duration, cfg.Seed)
	sem := make(chan struct{}, cfg.MaxInFlight)
	var wg sync.WaitGroup
	timer := time.NewTimer(0)
	defer timer.Stop()
	<-timer.C
	for i, at := range sched {
		if wait := time.Until(start.Add(at)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-ctx.Done():
				wg.Wait()
				return
			}
		}
		// A late scheduler (GC, CPU contention) sends at once: the latency still counts from
		// the intended time, so the delay is charged to the measurement, not hidden.
		measured := at >= cfg.Warmup
		p := prepared[i%len(prepared)]
		r.sent.Add(1)
		select {
		case sem <- struct{}{}:
		default:
			if measured {
				r.add(sample{at: at, items: p.items, kind: KindOverflow})
			}
			if cfg.Overflow != nil {
				cfg.Overflow(p)
			}
			continue
		}
		wg.Add(1)
		r.inflight.Add(1)
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			defer r.inflight.Add(-1)
			intended := start.Add(at)
			rctx, cancel := context.WithDeadline(ctx, intended.Add(cfg.Timeout))
			err := cfg.Target.Do(rctx, p)
			cancel()
			lat := time.Since(intended)
			if measured {
				r.add(sample{at: at, latency: lat, items: p.items, kind: kindOrEmpty(err)})
			} else if err == nil && at+lat >= cfg.Warmup {
				// A warm-up request answered in the window: a reply the window's rates count
				// (the window's first latency holds only such replies).
				r.addWarmReply(at+lat, lat, p.items)
			}
		}()
	}
	wg.Wait()
}

func runClosed(ctx context.Context, cfg Config, prepared []Prepared, r *recorder, start time.Time) {
	var next atomic.Int64
	deadline := start.Add(cfg.Duration)
	var wg sync.WaitGroup
	for range cfg.Concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				sent := time.Now()
				if !sent.Before(deadline) {
					return
				}
				i := next.Add(1) - 1
				p := prepared[int(i)%len(prepared)]
				r.sent.Add(1)
				r.inflight.Add(1)
				rctx, cancel := context.WithTimeout(ctx, cfg.Timeout)
				err := cfg.Target.Do(rctx, p)
				cancel()
				r.inflight.Add(-1)
				at, lat := sent.Sub(start), time.Since(sent)
				if at >= cfg.Warmup {
					r.add(sample{at: at, latency: lat, items: p.items, kind: kindOrEmpty(err)})
				} else if err == nil && at+lat >= cfg.Warmup {
					// Sent in the warm-up, answered in the window: not measured (its latency
					// straddles the warm-up), but a reply the window's rates count.
					r.addWarmReply(at+lat, lat, p.items)
				}
			}
		}()
	}
	wg.Wait()
}

func kindOrEmpty(err error) string {
	if err == nil {
		return ""
	}
	return KindOf(err)
}

// recorder collects samples from many goroutines.
type recorder struct {
	sent, inflight atomic.Int64
	mu             sync.Mutex
	samples        []sample
	ok, errs       int64
	recent         *hdrhistogram.Histogram // since the last progress tick
	// warm: the successful replies to warm-up requests that arrived after the warm-up (at is
	// their send time since start).
	warm []sample
}

// addWarmReply records a successful reply to a warm-up request that arrived at done.
func (r *recorder) addWarmReply(done, latency time.Duration, items int) {
	r.mu.Lock()
	r.warm = append(r.warm, sample{at: done - latency, latency: latency, items: items})
	r.mu.Unlock()
}

func (r *recorder) init() {
	r.recent = newHist()
}

func newHist() *hdrhistogram.Histogram {
	// 1 µs … 10 min, 3 significant digits.
	return hdrhistogram.New(1, int64(10*time.Minute/time.Microsecond), 3)
}

func (r *recorder) add(s sample) {
	r.mu.Lock()
	r.samples = append(r.samples, s)
	if s.kind == "" {
		r.ok++
		_ = r.recent.RecordValue(s.latency.Microseconds())
	} else {
		r.errs++
	}
	r.mu.Unlock()
}

func startProgress(ctx context.Context, cfg Config, r *recorder, start time.Time) (stop func()) {
	if cfg.Progress == nil {
		return func() {}
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		t := time.NewTicker(500 * time.Millisecond)
		defer t.Stop()
		var last Progress
		for tick := 0; ; tick++ {
			select {
			case <-done:
				cfg.Progress(last)
				return
			case <-ctx.Done():
				return
			case <-t.C:
			}
			r.mu.Lock()
			p := Progress{Elapsed: time.Since(start), Duration: cfg.Duration, Sent: r.sent.Load(), OK: r.ok, Errors: r.errs,
				InFlight: r.inflight.Load()}
			if r.recent.TotalCount() > 0 {
				p.P50 = time.Duration(r.recent.ValueAtQuantile(50)) * time.Microsecond
				p.P99 = time.Duration(r.recent.ValueAtQuantile(99)) * time.Microsecond
			} else {
				p.P50, p.P99 = last.P50, last.P99
			}
			if tick%2 == 1 { // the live percentiles cover about the last second
				r.recent.Reset()
			}
			r.mu.Unlock()
			cfg.Progress(p)
			last = p
		}
	}()
	return func() { close(done); wg.Wait() }
}

// result builds the report from the samples.
func (r *recorder) result(cfg Config, start, end time.Time, nodes []NodeSample) *Result {
	r.mu.Lock()
	defer r.mu.Unlock()
	h := newHist()
	res := &Result{
		Target:      cfg.Target.String(),
		Workload:    cfg.Trace.Spec().Name,
		RatePerSec:  cfg.Rate,
		Concurrency: cfg.Concurrency,
		DurationSec: cfg.Duration.Seconds(),
		WarmupSec:   cfg.Warmup.Seconds(),
		SLOms:       ms(cfg.SLO),
		ErrorsBy:    map[string]int64{},
		Nodes:       nodes,
		hist:        h,
	}
	if cfg.Rate > 0 {
		res.Mode = "open"
	} else {
		res.Mode = "closed"
	}
	sort.Slice(r.samples, func(i, j int) bool { return r.samples[i].at < r.samples[j].at })
	var good, items int64
	var inWindow, goodInWindow, itemsInWindow int64 // closed loop: replies by the end of Duration
	var okLat []time.Duration                       // successful requests' latencies, for exact percentiles
	lastDone := cfg.Duration
	windows := map[int]*window{}
	// The plot's points: every stride-th success, so that past maxPoints they thin out evenly
	// over the run instead of stopping partway.
	var okCount int
	for _, s := range r.samples {
		if s.kind == "" {
			okCount++
		}
	}
	stride := max(1, (okCount+maxPoints-1)/maxPoints)
	for _, s := range r.samples {
		res.Requests++
		sec := int(s.at / time.Second)
		w := windows[sec]
		if w == nil {
			w = &window{}
			windows[sec] = w
		}
		if s.kind != "" {
			res.Errors++
			res.ErrorsBy[s.kind]++
			w.errs++
			continue
		}
		res.OK++
		items += int64(s.items)
		okLat = append(okLat, s.latency)
		_ = h.RecordValue(s.latency.Microseconds())
		w.lat = append(w.lat, s.latency)
		w.ok++
		if s.latency <= cfg.SLO {
			good++
		}
		if d := s.at + s.latency; d > lastDone {
			lastDone = d
		}
		if s.at+s.latency <= cfg.Duration {
			inWindow++
			itemsInWindow += int64(s.items)
			if s.latency <= cfg.SLO {
				goodInWindow++
			}
		}
		if (res.OK-1)%int64(stride) == 0 {
			res.Points = append(res.Points, Point{T: s.at.Seconds(), Ms: ms(s.latency)})
		}
	}
	// Replies in the window to requests sent in the warm-up are replies in the window too: left
	// out, the window's first round of replies is missing and the rate reads low by about one
	// latency over the window (both loops).
	var warmOK, warmItems, warmGood int64 // open loop: every one (its window ends at the last reply)
	for _, s := range r.warm {
		d := s.at + s.latency
		if d > lastDone {
			lastDone = d
		}
		warmOK++
		warmItems += int64(s.items)
		if s.latency <= cfg.SLO {
			warmGood++
		}
		if d <= cfg.Duration {
			inWindow++
			itemsInWindow += int64(s.items)
			if s.latency <= cfg.SLO {
				goodInWindow++
			}
		}
	}
	// The measurement window runs from the end of warm-up until the last reply (at least the
	// scheduled duration), so a backlog drained after the schedule ends lowers the throughput
	// instead of vanishing.
	elapsed := (lastDone - cfg.Warmup).Seconds()
	okN, itemsN, goodN := res.OK+warmOK, items+warmItems, good+warmGood
	if cfg.Rate == 0 {
		// Closed loop: the workers' last requests straddle the end; like wrk, count the replies
		// that arrived within the window over the window, so the rate is not diluted by a tail.
		elapsed = (cfg.Duration - cfg.Warmup).Seconds()
		okN, itemsN, goodN = inWindow, itemsInWindow, goodInWindow
	}
	res.ElapsedSec = elapsed
	if elapsed > 0 {
		res.ThroughputRPS = float64(okN) / elapsed
		res.ItemsPerSec = float64(itemsN) / elapsed
		res.GoodputRPS = float64(goodN) / elapsed
	}
	if res.Requests > 0 {
		res.GoodputRatio = float64(good) / float64(res.Requests)
	}
	if len(okLat) > 0 {
		// Exact nearest-rank percentiles of the samples (the histogram's are within its 1 %
		// precision, and its rank rounding put p99 of 188 samples at the 186th).
		slices.Sort(okLat)
		q := func(p float64) float64 { return ms(NearestRank(okLat, p/100)) }
		res.P50ms, res.P90ms, res.P99ms, res.P999ms = q(50), q(90), q(99), q(99.9)
		// Over every measured request, a failure counted as the client's timeout: the
		// percentiles above are of successes only, and a run whose slowest requests failed
		// would read faster for it.
		all := okLat
		if res.Errors > 0 {
			all = append(slices.Clone(okLat), slices.Repeat([]time.Duration{cfg.Timeout}, int(res.Errors))...)
			slices.Sort(all)
		}
		res.P99AllMs = ms(NearestRank(all, 0.99))
		// Exact too: the histogram's max is the top of its bucket, its mean of bucket midpoints,
		// and it drops a value past its range (about 17.9 min; --timeout may be longer).
		res.MaxMs = ms(okLat[len(okLat)-1])
		var sum float64
		for _, l := range okLat {
			sum += float64(l)
		}
		res.MeanMs = sum / float64(len(okLat)) / float64(time.Millisecond)
		for _, p := range cdfQuantiles {
			res.CDF = append(res.CDF, Quantile{Q: p / 100, Ms: q(p)})
		}
	} else if res.Errors > 0 {
		res.P99AllMs = ms(cfg.Timeout) // every request failed: each counts as the timeout
	}
	secs := make([]int, 0, len(windows))
	for s := range windows {
		secs = append(secs, s)
	}
	sort.Ints(secs)
	for _, s := range secs {
		w := windows[s]
		tw := Window{T: float64(s), OK: w.ok, Errors: w.errs}
		if len(w.lat) > 0 { // a second holds few samples: exact ranks, not the histogram's
			slices.Sort(w.lat)
			tw.P50ms, tw.P99ms = ms(NearestRank(w.lat, 0.5)), ms(NearestRank(w.lat, 0.99))
		}
		res.Timeline = append(res.Timeline, tw)
	}
	return res
}

type window struct {
	lat      []time.Duration // its successful requests' latencies
	ok, errs int64
}

const maxPoints = 100_000

var cdfQuantiles = []float64{0, 10, 20, 30, 40, 50, 60, 70, 75, 80, 85, 90, 92.5, 95, 96, 97, 98, 99, 99.5, 99.7, 99.9, 99.95, 99.99, 100}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// NearestRank is the q-quantile of sorted by the nearest-rank rule: the smallest sample at or
// below which at least q of the samples lie (p99 of 50 samples is the largest).
func NearestRank[T any](sorted []T, q float64) T {
	// Less a hair: 99.9/100 is 0.9990000000000001, whose ceiling over 1,000 samples is the 1,000th.
	i := int(math.Ceil(q*float64(len(sorted))-1e-9)) - 1
	return sorted[max(0, min(i, len(sorted)-1))]
}
