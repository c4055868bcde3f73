package faults

import (
	"math"
	"math/rand/v2"
	"testing"
)

// fewestFailures is exhaustive search: the most jobs that first-come-first-served on one machine
// serves within their deadlines, over every subset (n ≤ 12).
func fewestFailures(jobs []idealJob, speed, slo float64) int {
	best := 0
	for mask := 0; mask < 1<<len(jobs); mask++ {
		t, n, ok := 0.0, 0, true
		for i, j := range jobs {
			if mask&(1<<i) == 0 {
				continue
			}
			t = max(t, j.release) + j.work/speed
			if t > j.release+slo+1e-12 {
				ok = false
				break
			}
			n++
		}
		if ok && n > best {
			best = n
		}
	}
	return len(jobs) - best
}

func countFailed(served []bool) int {
	n := 0
	for _, s := range served {
		if !s {
			n++
		}
	}
	return n
}

// TestIdealSchedulerRefusesTheFewest: on random bursts the ideal scheduler's refusals are as few
// as exhaustive search finds, and what it keeps meets every deadline.
func TestIdealSchedulerRefusesTheFewest(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	const speed, slo = 2.0, 0.5
	hard := 0
	for trial := range 3000 {
		n := 1 + rng.IntN(11)
		jobs := make([]idealJob, n)
		at := 0.0
		for i := range jobs {
			at += rng.ExpFloat64() * 0.15
			jobs[i] = idealJob{release: at, work: 0.05 + rng.ExpFloat64()*0.4}
		}
		served := idealServed(jobs, constSpeed(speed), slo)
		want := fewestFailures(jobs, speed, slo)
		if got := countFailed(served); got != want {
			t.Fatalf("trial %d: ideal scheduler fails %d, exhaustive search %d; jobs %+v", trial, got, want, jobs)
		}
		tm := 0.0
		for i, j := range jobs {
			if !served[i] {
				continue
			}
			tm = max(tm, j.release) + j.work/speed
			if tm > j.release+slo+1e-9 {
				t.Fatalf("trial %d: kept job %d finishes at %.3f, after its deadline %.3f", trial, i, tm, j.release+slo)
			}
		}
		if want > 0 {
			hard++
		}
	}
	if hard < 300 {
		t.Fatalf("only %d of 3000 trials needed a refusal: the test does not exercise refusing", hard)
	}
}

// TestIdealSchedulerRefusesTheLargestOfABurst: three jobs at once, room for two: the largest goes.
func TestIdealSchedulerRefusesTheLargestOfABurst(t *testing.T) {
	jobs := []idealJob{{0, 0.2}, {0, 0.5}, {0.01, 0.2}}
	got := idealServed(jobs, constSpeed(1), 0.5)
	if !got[0] || got[1] || !got[2] {
		t.Fatalf("served %v, want the 0.5 s job refused and both 0.2 s jobs served", got)
	}
}

// TestIdealMachineSlowsAtItsStep: work that straddles a node's slow-down runs at the old speed
// up to it and at the new one after.
func TestIdealMachineSlowsAtItsStep(t *testing.T) {
	m := stepSpeed(8, 7.1, 1) // 8 nodes, one of them 10× slower from t=1
	for _, c := range []struct{ start, work, want float64 }{
		{0, 4, 0.5},           // done before the step
		{2, 7.1, 3},           // after it
		{0.5, 4 + 7.1, 1 + 1}, // 4 node-seconds before, 7.1 after
		{1, 0, 1},             // nothing to do
	} {
		if got := m(c.start, c.work); math.Abs(got-c.want) > 1e-9 {
			t.Errorf("start %v, work %v: done at %v, want %v", c.start, c.work, got, c.want)
		}
	}
}
