// Package calibrate measures a scorer node and fits the shared cost formula to it
// (internal/costmodel): seconds ≈ a·Tokens + b·Pairs + c·Batches.
//
// The design is a grid of batch shapes (prefix length × item count × item length), each sent
// several times, one batch at a time so the node never merges or queues them. Every query is
// made unique so the node's prefix cache cannot hide the prefix's cost; a reply that still says
// prefix_cached is fitted as such. Features come from the token counts the node reports, the
// target from the compute time it measured (BatchStats.compute_seconds; wall time when absent).
// The fit minimises relative error (weights 1/y²) under a ≥ 0 constraint, exactly: with three
// coefficients every active set is tried. The noise σ is the RMS of log(measured/predicted),
// which is what the emulated engine's log-normal noise needs.
//
// Functions are stateless and safe for concurrent use.
package calibrate

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/relevance-scoring/relevance/bench/workload"
	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Shape is one designed batch.
type Shape struct {
	QueryWords int // query length in words (drives the prefix length)
	Items      int
	ItemTokens int // approximate tokens per item
}

// Grid returns the full design: queries of 3, 40 and 120 words × 1, 4, 8 items × 32, 96, 256
// tokens (27 shapes). The largest batch is ~2k tokens: the small model on one contended CPU
// thread runs a few hundred tokens per second, and the fit needs many batches more than a few
// huge ones.
func Grid() []Shape {
	var s []Shape
	for _, q := range []int{3, 40, 120} {
		for _, n := range []int{1, 4, 8} {
			for _, l := range []int{32, 96, 256} {
				s = append(s, Shape{QueryWords: q, Items: n, ItemTokens: l})
			}
		}
	}
	return s
}

// Options configures a calibration run.
type Options struct {
	Shapes  []Shape // nil: Grid()
	Repeats int     // times each shape is sent; 0 means 2
	// Warmup batches sent first and discarded (page faults, lazy init); 0 means 2.
	Warmup int
	// Budget bounds the whole measurement; shapes not reached are skipped (the order is
	// shuffled, so a cut run still covers the grid evenly). 0 means 10 minutes.
	Budget time.Duration
	// Timeout bounds one batch; 0 means 2 minutes.
	Timeout time.Duration
	Seed    uint64
	// Log receives one line per batch when set.
	Log io.Writer
	// CPUTime, when set, reads the node process's CPU time; each batch is then timed by the
	// CPU time the node spent on it instead of the wall time it reports. On a machine shared
	// with other work (CPU contention), that is what the node would take on a core of its own,
	// which is what an emulated node should reproduce. Only meaningful for a one-thread node.
	CPUTime func() (time.Duration, error)
}

// Sample is one measured batch.
type Sample struct {
	Shape        Shape
	PrefixTokens int
	ItemTokens   []int
	PrefixCached bool
	Seconds      float64 // what is fitted: node CPU time, else node compute time, else wall time
	WallSeconds  float64
	CPUSeconds   float64 // node process CPU time during the batch (with Options.CPUTime)
}

// Features is the sample's design vector.
func (s Sample) Features() costmodel.Features {
	return costmodel.BatchFeatures(s.PrefixTokens, s.ItemTokens, s.PrefixCached)
}

// Measure sends the designed batches to the node one at a time.
func Measure(ctx context.Context, c relevancev1.ScorerClient, o Options) ([]Sample, string, bool, error) {
	shapes := o.Shapes
	if shapes == nil {
		shapes = Grid()
	}
	reps := o.Repeats
	if reps == 0 {
		reps = 2
	}
	warm := o.Warmup
	if warm == 0 {
		warm = 2
	}
	budget := o.Budget
	if budget == 0 {
		budget = 10 * time.Minute
	}
	timeout := o.Timeout
	if timeout == 0 {
		timeout = 2 * time.Minute
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0xca11b))
	var plan []Shape
	for range reps {
		plan = append(plan, shapes...)
	}
	rng.Shuffle(len(plan), func(i, j int) { plan[i], plan[j] = plan[j], plan[i] })
	plan = append(append([]Shape(nil), shapes[:min(warm, len(shapes))]...), plan...)

	deadline := time.Now().Add(budget)
	var out []Sample
	model, emulated := "", false
	failed := 0
	var err error
	for k, sh := range plan {
		if time.Now().After(deadline) {
			if o.Log != nil {
				fmt.Fprintf(o.Log, "budget %v reached after %d of %d batches\n", budget, k, len(plan))
			}
			break
		}
		req := buildBatch(rng, sh, k)
		bctx, cancel := context.WithTimeout(ctx, timeout)
		var cpu0 time.Duration
		if o.CPUTime != nil {
			if cpu0, err = o.CPUTime(); err != nil {
				cancel()
				return out, model, emulated, fmt.Errorf("read node CPU time: %w", err)
			}
		}
		start := time.Now()
		var resp *relevancev1.ScoreBatchResponse
		resp, err = c.ScoreBatch(bctx, req)
		wall := time.Since(start).Seconds()
		cancel()
		if err != nil {
			// One failed batch (deadline, shedding) costs a sample, not the run; many mean the
			// node is unusable.
			failed++
			if o.Log != nil {
				fmt.Fprintf(o.Log, "batch %3d/%d  %+v failed: %v\n", k+1, len(plan), sh, err)
			}
			if failed > 3 && failed > len(out)/4 {
				return out, model, emulated, fmt.Errorf("%d batches failed, last (%+v): %w", failed, sh, err)
			}
			continue
		}
		model, emulated = resp.GetModel(), resp.GetEmulated()
		s := Sample{Shape: sh, WallSeconds: wall, Seconds: resp.GetStats().GetComputeSeconds(),
			PrefixTokens: int(resp.GetStats().GetPrefixTokens()), PrefixCached: resp.GetStats().GetPrefixCached()}
		if o.CPUTime != nil {
			cpu1, err := o.CPUTime()
			if err != nil {
				return out, model, emulated, fmt.Errorf("read node CPU time: %w", err)
			}
			s.CPUSeconds = (cpu1 - cpu0).Seconds()
			s.Seconds = s.CPUSeconds
		}
		if s.PrefixTokens == 0 {
			s.PrefixTokens = int(resp.GetUsage().GetPrefixTokens())
		}
		if s.Seconds <= 0 {
			s.Seconds = wall
		}
		if len(resp.GetScores()) != sh.Items {
			return out, model, emulated, fmt.Errorf("batch %d: %d scores for %d items", k, len(resp.GetScores()), sh.Items)
		}
		itemTotal := int(resp.GetStats().GetItemTokens())
		for _, sc := range resp.GetScores() {
			s.ItemTokens = append(s.ItemTokens, int(sc.GetTokens()))
		}
		if sum(s.ItemTokens) == 0 && itemTotal > 0 { // per-item counts missing: share the total
			for i := range s.ItemTokens {
				s.ItemTokens[i] = itemTotal / len(s.ItemTokens)
			}
		}
		if o.Log != nil {
			fmt.Fprintf(o.Log, "batch %3d/%d  prefix %4d  items %2d × ~%4d tok  compute %8.2f ms  cpu %8.2f ms  wall %8.2f ms%s\n",
				k+1, len(plan), s.PrefixTokens, sh.Items, sum(s.ItemTokens)/max(1, len(s.ItemTokens)), 1000*resp.GetStats().GetComputeSeconds(), 1000*s.CPUSeconds, 1000*wall,
				map[bool]string{true: "  (warm-up)", false: ""}[k < warm])
		}
		if k >= warm {
			out = append(out, s)
		}
	}
	return out, model, emulated, nil
}

func sum(xs []int) int {
	n := 0
	for _, x := range xs {
		n += x
	}
	return n
}

// buildBatch makes one batch of shape sh; k makes its query unique (no prefix-cache hits).
func buildBatch(rng *rand.Rand, sh Shape, k int) *relevancev1.ScoreBatchRequest {
	q := workload.Query(rng, min(sh.QueryWords, 6))
	if sh.QueryWords > 6 {
		// Long "queries" stand in for long prefixes (long instructions, query expansions).
		words := strings.Fields(workload.Item(rng, sh.QueryWords*2, false))
		if len(words) > sh.QueryWords {
			words = words[:sh.QueryWords]
		}
		q += " " + strings.Join(words, " ")
	}
	req := &relevancev1.ScoreBatchRequest{RequestId: fmt.Sprintf("calibrate-%d", k), Query: fmt.Sprintf("%s #%d", q, k)}
	for i := range sh.Items {
		req.Items = append(req.Items, &relevancev1.Item{Id: fmt.Sprint(i), Text: workload.Item(rng, sh.ItemTokens, i%8 == 7)})
	}
	return req
}

// Fit is the result of a least-squares fit.
type Fit struct {
	Coeffs costmodel.Coeffs
	// Sigma is the RMS of log(measured/predicted).
	Sigma float64
	// R2 is the coefficient of determination on seconds.
	R2 float64
	// MaxRelErr is the largest |measured/predicted − 1|.
	MaxRelErr float64
}

// FitSamples fits non-negative coefficients minimising relative squared error.
func FitSamples(samples []Sample) (Fit, error) {
	if len(samples) < 4 {
		return Fit{}, fmt.Errorf("fit: need at least 4 samples, got %d", len(samples))
	}
	x := make([][3]float64, len(samples))
	y := make([]float64, len(samples))
	for i, s := range samples {
		f := s.Features()
		x[i] = [3]float64{f.Tokens, f.Pairs, f.Batches}
		y[i] = s.Seconds
		if !(y[i] > 0) {
			return Fit{}, fmt.Errorf("fit: sample %d has non-positive time %v", i, y[i])
		}
	}
	best, bestErr := [3]float64{}, math.Inf(1)
	// Every active set of the three coefficients; keep the best feasible (all ≥ 0) solution.
	for mask := 1; mask < 8; mask++ {
		var idx []int
		for j := range 3 {
			if mask&(1<<j) != 0 {
				idx = append(idx, j)
			}
		}
		coef, ok := weightedLS(x, y, idx)
		if !ok {
			continue
		}
		feasible := true
		for _, c := range coef {
			if c < 0 {
				feasible = false
			}
		}
		if !feasible {
			continue
		}
		var full [3]float64
		for k, j := range idx {
			full[j] = coef[k]
		}
		if e := relSSE(x, y, full); e < bestErr {
			best, bestErr = full, e
		}
	}
	if math.IsInf(bestErr, 1) {
		return Fit{}, errors.New("fit: no feasible solution (degenerate design)")
	}
	f := Fit{Coeffs: costmodel.Coeffs{A: best[0], B: best[1], C: best[2]}}
	var mean, ssTot, ssRes, logSq float64
	for _, v := range y {
		mean += v
	}
	mean /= float64(len(y))
	for i := range y {
		p := dot(x[i], best)
		ssTot += (y[i] - mean) * (y[i] - mean)
		ssRes += (y[i] - p) * (y[i] - p)
		if p > 0 {
			l := math.Log(y[i] / p)
			logSq += l * l
			f.MaxRelErr = math.Max(f.MaxRelErr, math.Abs(y[i]/p-1))
		}
	}
	f.Sigma = math.Sqrt(logSq / float64(len(y)))
	if ssTot > 0 {
		f.R2 = 1 - ssRes/ssTot
	}
	return f, nil
}

func dot(a, b [3]float64) float64 { return a[0]*b[0] + a[1]*b[1] + a[2]*b[2] }

func relSSE(x [][3]float64, y []float64, c [3]float64) float64 {
	e := 0.0
	for i := range y {
		r := (dot(x[i], c) - y[i]) / y[i]
		e += r * r
	}
	return e
}

// weightedLS solves min Σ ((x_i·c − y_i)/y_i)² over the columns idx by the normal equations,
// with columns scaled to unit norm first (tokens, pairs and batches differ by 10⁶).
func weightedLS(x [][3]float64, y []float64, idx []int) ([]float64, bool) {
	n := len(idx)
	scale := make([]float64, n)
	for k, j := range idx {
		s := 0.0
		for i := range y {
			v := x[i][j] / y[i]
			s += v * v
		}
		if s == 0 {
			return nil, false
		}
		scale[k] = math.Sqrt(s)
	}
	a := make([][]float64, n)
	b := make([]float64, n)
	for r := range n {
		a[r] = make([]float64, n)
		for i := range y {
			w := 1 / (y[i] * y[i])
			xr := x[i][idx[r]] / scale[r]
			b[r] += w * xr * y[i]
			for c := range n {
				a[r][c] += w * xr * x[i][idx[c]] / scale[c]
			}
		}
	}
	sol, ok := solve(a, b)
	if !ok {
		return nil, false
	}
	for k := range sol {
		sol[k] /= scale[k]
	}
	return sol, true
}

// solve is Gaussian elimination with partial pivoting; false when singular.
func solve(a [][]float64, b []float64) ([]float64, bool) {
	n := len(b)
	for col := range n {
		p := col
		for r := col + 1; r < n; r++ {
			if math.Abs(a[r][col]) > math.Abs(a[p][col]) {
				p = r
			}
		}
		if math.Abs(a[p][col]) < 1e-12 {
			return nil, false
		}
		a[col], a[p] = a[p], a[col]
		b[col], b[p] = b[p], b[col]
		for r := col + 1; r < n; r++ {
			f := a[r][col] / a[col][col]
			for c := col; c < n; c++ {
				a[r][c] -= f * a[col][c]
			}
			b[r] -= f * b[col]
		}
	}
	x := make([]float64, n)
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for c := r + 1; c < n; c++ {
			s -= a[r][c] * x[c]
		}
		x[r] = s / a[r][r]
	}
	return x, true
}
