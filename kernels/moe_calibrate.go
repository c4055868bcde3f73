package kernels

import (
	"math/rand/v2"
	"slices"
	"sync"
	"time"
)

// exactSamples are the row counts at which the exact variant's item cost is measured (h is the
// item height, exactItemRows); the model ItemSeconds + n·RowSeconds is fitted to them by least
// squares.
func exactSamples(h int) []int { return []int{4, 16, h / 2, h} }

// measureMoECosts measures a cost table for the layer shape sh.
//
// Each round times one work item of every kind (a whole tile of each block variant, and exact
// items of each sample size), each on the next expert in turn so the weights come from memory
// as in a real pass, not from a cache warmed by the previous repetition. Rounds repeat until the
// budget is spent (at least one, at most 31); the median per kind is robust to outliers. Times
// are the thread's CPU time (Linux), so work from other processes on the same cores does not
// count — only the cycles the kernels got. The rounds run on as many goroutines as the grouped
// GEMM uses (Threads()), each on its own experts, so the table includes what the threads cost
// each other in shared cache and memory bandwidth: with AMX, whose arithmetic outruns memory,
// one-thread costs were 20–30 % low for big batches on two threads and misled the choice.
func measureMoECosts(experts []Expert, sh moeShape, budget time.Duration) MoECostTable {
	var pool []*Expert
	for e := range experts {
		if checkExpert(&experts[e], sh) == nil {
			pool = append(pool, &experts[e])
		}
	}
	h := exactItemRows(pool[0].Gate)
	type kind struct {
		m, blockM int
	}
	var kinds []kind
	for v := MoEVariant(0); int(v) < numBlockVariants; v++ {
		kinds = append(kinds, kind{v.BlockM(), v.BlockM()})
	}
	for _, m := range exactSamples(h) {
		kinds = append(kinds, kind{m, 0})
	}
	workers := max(1, min(Threads(), len(pool)))
	perWorker := make([][][]float64, workers)
	start := time.Now()
	var wg sync.WaitGroup
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			tile := max(128, h)
			rng := rand.New(rand.NewPCG(1, uint64(w)))
			xs := make([]float32, tile*sh.hidden)
			for i := range xs {
				xs[i] = float32(rng.NormFloat64())
			}
			gs := make([]float32, tile*sh.inter)
			u := make([]float32, tile*sh.inter)
			ys := make([]float32, tile*sh.hidden)
			samples := make([][]float64, len(kinds))
			next := w // workers start on different experts and stay apart
			var clock cpuClock
			clock.lock()
			defer clock.unlock()
			for round := 0; round < 31 && (round == 0 || time.Since(start) < budget); round++ {
				for i, k := range kinds {
					ex := pool[next%len(pool)]
					next += workers
					// A pass's items hint the next item's weights (runGrouped); so do these, to
					// time the item as it runs there.
					nx := pool[next%len(pool)]
					t0 := clock.now()
					gateUpItem(ex, gs, xs, u, sh.hidden, sh.inter, k.m, 0, sh.inter, k.blockM, nx.Gate)
					downItem(ex, ys, gs, sh.hidden, sh.inter, k.m, 0, sh.hidden, k.blockM, nx.Down)
					samples[i] = append(samples[i], (clock.now() - t0).Seconds())
				}
			}
			perWorker[w] = samples
		}()
	}
	wg.Wait()
	samples := make([][]float64, len(kinds))
	for _, ws := range perWorker {
		for i := range samples {
			samples[i] = append(samples[i], ws[i]...)
		}
	}
	var c MoECostTable
	for v := range numBlockVariants {
		c.TileSeconds[v] = median(samples[v])
	}
	c.RowGranule = rowGranule(pool[0].Gate, h)
	c.ItemRows = h
	samp := exactSamples(h)
	ms := make([]float64, len(samp))
	ts := make([]float64, len(samp))
	for i, m := range samp {
		ms[i] = float64(c.granuleRows(m))
		ts[i] = median(samples[numBlockVariants+i])
	}
	c.ItemSeconds, c.RowSeconds = fitAffine(ms, ts)
	return c
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n == 0 {
		return 0
	}
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// fitAffine is the least-squares line t ≈ a + b·m, with a and b clamped at zero (a negative
// intercept or slope would come only from noise and would make the model nonsensical).
func fitAffine(m, t []float64) (a, b float64) {
	n := float64(len(m))
	var sm, st, smm, smt float64
	for i := range m {
		sm += m[i]
		st += t[i]
		smm += m[i] * m[i]
		smt += m[i] * t[i]
	}
	den := n*smm - sm*sm
	if den == 0 {
		return st / n, 0
	}
	b = (n*smt - sm*st) / den
	if b < 0 {
		return st / n, 0
	}
	a = (st - b*sm) / n
	if a < 0 {
		// Refit through the origin.
		return 0, smt / smm
	}
	return a, b
}
