// Package calibrate measures a scorer node and fits the shared cost formula to it
// (package costmodel): seconds ≈ a·Tokens + b·Pairs + c·Batches.
//
// The design is a grid of batch shapes (prefix length × item count × item length), each sent
// several times, one batch at a time so the node never merges or queues them. Every query is
// made unique so the node's prefix cache cannot hide the prefix's cost; a reply that still says
// prefix_cached is fitted as such. Features come from the token counts the node reports, the
// target from the compute time it measured (BatchStats.compute_seconds; wall time when absent).
// The fit is costmodel.Fit (relative error under a ≥ 0 constraint), the one the scorer node
// uses at start-up. The noise σ is the RMS of log(measured/predicted), which is what the
// emulated engine's log-normal noise needs.
//
// Functions are stateless and safe for concurrent use.
package calibrate

import (
	"context"
	"fmt"
	"io"
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

// Fit is the result of a least-squares fit (costmodel.Fit, shared with the scorer node's
// start-up calibration).
type Fit = costmodel.FitResult

// FitSamples fits non-negative coefficients minimising relative squared error (costmodel.Fit).
func FitSamples(samples []Sample) (Fit, error) {
	cs := make([]costmodel.Sample, len(samples))
	for i, s := range samples {
		cs[i] = costmodel.Sample{Features: s.Features(), Seconds: s.Seconds}
	}
	return costmodel.Fit(cs)
}
