package load

import (
	"context"
	"testing"
	"time"
)

// TestOpenLoopThroughputIsTheArrivalRateWhenTheServerKeepsUp: an open loop against a server
// that answers every request in L, well within its capacity, completes requests as fast as they
// arrive, and its throughput and goodput must say so. The window runs from the end of the
// warm-up to the last reply (past the schedule's end by about L); its first L holds the replies
// to warm-up requests. Counting the one but not the other read the rates low by L over the
// window (bench compare's goodput_rps column: 10 s runs, 2 s warm-up, replies of ~0.3–1 s).
func TestOpenLoopThroughputIsTheArrivalRateWhenTheServerKeepsUp(t *testing.T) {
	const (
		rate = 200.0
		lat  = 300 * time.Millisecond
		d    = 2 * time.Second
		warm = 500 * time.Millisecond
		seed = 7
	)
	cfg := Config{Target: sleepTarget{lat}, Trace: smallTrace(t), Rate: rate, Duration: d, Warmup: warm,
		SLO: time.Second, Seed: seed}
	res, err := Run(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if res.Errors != 0 {
		t.Fatalf("errors %v, want none", res.ErrorsBy)
	}
	// The arrival rate this seed's schedule realised in the measured part (Poisson noise aside).
	var arrived int
	for _, at := range Schedule(rate, d, seed) {
		if at >= warm {
			arrived++
		}
	}
	want := float64(arrived) / (d - warm).Seconds()
	for _, f := range []struct {
		name string
		got  float64
	}{{"throughput_rps", res.ThroughputRPS}, {"goodput_rps", res.GoodputRPS}} {
		if f.got < 0.9*want || f.got > 1.1*want {
			t.Errorf("%s %.1f req/s over a %.2f s window, want the arrival rate %.1f ± 10 %% (every request answered in %v)",
				f.name, f.got, res.ElapsedSec, want, lat)
		}
	}
}
