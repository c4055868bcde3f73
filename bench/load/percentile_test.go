package load

import (
	"strings"
	"testing"
	"time"
)

// resultOf builds a Result from canned samples, as Run would after the load.
func resultOf(t *testing.T, cfg Config, samples []sample) *Result {
	t.Helper()
	if err := cfg.validate(); err != nil {
		t.Fatal(err)
	}
	r := &recorder{}
	r.init()
	for _, s := range samples {
		r.add(s)
	}
	start := time.Now()
	return r.result(cfg, start, start.Add(cfg.Duration), nil)
}

func reviewCfg(t *testing.T) Config {
	return Config{Target: newTarget(t, "http://127.0.0.1:9/v1/rerank", 1), Trace: smallTrace(t), Rate: 10, Duration: 60 * time.Second}
}

// TestP99IsNearestRankAtSmallCounts: p99 of 188 samples by nearest rank is the 187th smallest
// (ceil(0.99*188)), as bench faults computes it; the histogram's rounding (rank = int(q*n + 0.5))
// gave the 186th: a value below which fewer than 99 % of the samples lie.
func TestP99IsNearestRankAtSmallCounts(t *testing.T) {
	for _, n := range []int{50, 120, 188, 249} {
		var ss []sample
		for i := 1; i <= n; i++ {
			ss = append(ss, sample{at: time.Duration(i) * time.Millisecond, latency: time.Duration(i) * time.Millisecond})
		}
		res := resultOf(t, reviewCfg(t), ss)
		want := float64((99*n + 99) / 100) // ceil(0.99 n) ms
		if res.P99ms != want {
			t.Errorf("n=%d: p99 %.1f ms, want the nearest-rank %v ms", n, res.P99ms, want)
		}
	}
}

// TestP99OfAllCountsTimedOutRequests: with 3 % of requests timed out, p99 of the successes reads
// 10 ms; p99 of all requests, failures counted at the timeout, says 30 s.
func TestP99OfAllCountsTimedOutRequests(t *testing.T) {
	var ss []sample
	for i := 0; i < 97; i++ {
		ss = append(ss, sample{at: time.Duration(i) * 10 * time.Millisecond, latency: 10 * time.Millisecond})
	}
	for i := 97; i < 100; i++ {
		ss = append(ss, sample{at: time.Duration(i) * 10 * time.Millisecond, latency: 30 * time.Second, kind: KindTimeout})
	}
	cfg := reviewCfg(t)
	cfg.Timeout = 30 * time.Second
	res := resultOf(t, cfg, ss)
	if res.P99ms != 10 || res.P99AllMs != 30000 {
		t.Errorf("p99 of the ok %.1f ms, of all %.1f ms; want 10 and 30000", res.P99ms, res.P99AllMs)
	}
	if s := res.Summary(); !strings.Contains(s, "p99 of all") {
		t.Errorf("summary does not give p99 of all requests:\n%s", s)
	}
}

// TestP999IsNearestRankAtRoundCounts: p99.9 of 1,000 samples 1..1000 ms is the 999th (ceil(0.999 n));
// q = 99.9/100 is 0.9990000000000001 in float64, and ceil lands one rank high (the maximum).
func TestP999IsNearestRankAtRoundCounts(t *testing.T) {
	var ss []sample
	for i := 1; i <= 1000; i++ {
		ss = append(ss, sample{at: time.Duration(i) * time.Millisecond, latency: time.Duration(i) * time.Millisecond})
	}
	if res := resultOf(t, reviewCfg(t), ss); res.P999ms != 999 {
		t.Errorf("p99.9 of 1..1000 ms = %.1f ms, want 999", res.P999ms)
	}
}

// TestP99OfAllWhenEveryRequestFailed: with no success, p99 of all requests (failures at the
// timeout) is the timeout, not 0.
func TestP99OfAllWhenEveryRequestFailed(t *testing.T) {
	var ss []sample
	for i := 1; i <= 100; i++ {
		ss = append(ss, sample{at: time.Duration(i) * time.Millisecond, kind: KindTimeout})
	}
	cfg := reviewCfg(t)
	if res := resultOf(t, cfg, ss); res.Errors == 100 && res.P99AllMs != 30000 {
		t.Errorf("all %d failed: p99 of all %.1f ms, want the 30 s timeout", res.Errors, res.P99AllMs)
	}
}

// TestMaxAndMeanAreExactAndCoverLatenciesPastTheHistogramRange: max_ms and mean_ms describe
// the same successes as the exact percentiles. The HDR histogram tracks 1 µs … 10 min (about
// 17.9 min once its buckets round up): a slower reply (--timeout 1h) was dropped from it
// silently, so max read below p99.9 and the mean left it out; and its max is the top of a
// bucket, its mean of bucket midpoints (every reply 1000 ms read max 1000.4, mean 1000.2).
func TestMaxAndMeanAreExactAndCoverLatenciesPastTheHistogramRange(t *testing.T) {
	cfg := reviewCfg(t)
	cfg.Timeout = time.Hour
	var ss []sample
	for i := range 99 {
		ss = append(ss, sample{at: time.Duration(i) * time.Second, latency: time.Second})
	}
	ss = append(ss, sample{at: 99 * time.Second, latency: 40 * time.Minute})
	res := resultOf(t, cfg, ss)
	wantMean := float64(99*1000+2_400_000) / 100
	if res.MaxMs != 2_400_000 || res.P999ms != 2_400_000 || res.MeanMs != wantMean {
		t.Errorf("max %.1f ms, p99.9 %.1f ms, mean %.2f ms; want 2400000, 2400000 and %.2f (one reply of 40 min)",
			res.MaxMs, res.P999ms, res.MeanMs, wantMean)
	}
	res = resultOf(t, reviewCfg(t), ss[:99]) // every reply exactly 1 s
	if res.MaxMs != 1000 || res.MeanMs != 1000 {
		t.Errorf("every reply 1000 ms: max %v ms, mean %v ms; want 1000 and 1000", res.MaxMs, res.MeanMs)
	}
}

// TestLatencyOverTimePointsSpanTheWholeRun: the latency-over-time plot draws at most maxPoints
// requests; past that it must thin them evenly over the run, not keep the first ones (150,000
// replies over 150 s drew only the first 100 s, as if the run had ended there).
func TestLatencyOverTimePointsSpanTheWholeRun(t *testing.T) {
	cfg := reviewCfg(t)
	cfg.Duration = 150 * time.Second
	const n = 150_000
	ss := make([]sample, n)
	for i := range ss {
		ss[i] = sample{at: time.Duration(i) * time.Millisecond, latency: 5 * time.Millisecond}
	}
	res := resultOf(t, cfg, ss)
	if len(res.Points) == 0 || len(res.Points) > maxPoints {
		t.Fatalf("%d points, want 1..%d", len(res.Points), maxPoints)
	}
	if first, last := res.Points[0].T, res.Points[len(res.Points)-1].T; first > 1 || last < 149 {
		t.Errorf("points span %.1f–%.1f s of a 0–150 s run", first, last)
	}
}
