package node

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

// calibration is what timing passes at start-up gave.
type calibration struct {
	Passes int           // timed passes fitted (the warm-up not counted)
	Took   time.Duration // the whole calibration, warm-up and tokenizing included
	Fit    costmodel.FitResult
	Err    error // why the fit is not used; nil when it is (or when none ran)
	// PairSeconds is b as the engine measured it alone (pairTimer), which the fit kept; 0 when
	// the engine cannot measure it and b was fitted.
	PairSeconds float64
	// KeptFrom is when a calibration reused from Config.CalibrationCache was measured (Passes,
	// Took and Fit are then that one's); zero for one measured at this start.
	KeptFrom time.Time
}

// pairTimer is an engine that can time its attention alone (model.Engine.PairSeconds): the
// calibration then takes b from it instead of fitting it.
type pairTimer interface {
	PairSeconds(ctx context.Context) (float64, error)
}

// calShape is one synthetic pass: a prefix of a query of queryWords words, then items of
// itemTokens tokens each.
type calShape struct{ queryWords, items, itemTokens int }

// calShapes is one round of the calibration design, cheapest first. It separates the three
// terms: a tiny pass (mostly the per-batch c), many short items (the per-token a), a long prefix
// and a long item (the attended pairs, b). Passes are small so that the warm-up and a few rounds
// fit the default budget on one slow, shared core (the small preset runs ~1,400 tokens a second
// there). The long item is 384 tokens: at 192 the attended pairs were a few per cent of the
// pass once attention got fast (AVX2 exp), within the timing noise, and the fit set b to 0 on
// the `make run` nodes; at 384 it found b = 2.9e-7 and 4.1e-7 s/pair on the two nodes, and on
// later starts anything from 5.8e-8 to 1.1e-6. So an engine that can time its attention alone
// (pairTimer) gives b, and the passes fit a and c around it.
var calShapes = []calShape{
	{2, 1, 16},
	{2, 8, 24},
	{120, 2, 24},
	{2, 1, 384},
}

const (
	calRounds = 5 // rounds of calShapes at most: a fast engine stops early
	calSeed   = 0x5eed
)

// calWords is the synthetic text's vocabulary: common words that tokenize to about a token each.
var calWords = strings.Fields("the of and to in a is that for it as was with be by on not he this are or his from at " +
	"which but have an they you were her she there been one all we their has would when if so no will more out up " +
	"into do any your what time can only other new some could these two may first then well also after made like " +
	"price water home light power small black battery steel cotton size colour weight model phone case kitchen")

// warmUp runs calibrate's warm-up pass alone, untimed: a node that starts from a kept
// calibration still pays a first pass's one-off costs (weights paged in, the activation arena
// grown) before it reports ready, and an engine that cannot run a pass fails its start as a
// calibrating node's does.
func warmUp(ctx context.Context, eng scorer.Engine, forward func(context.Context, []*scorer.Group) (scorer.ForwardStats, error)) error {
	rng := rand.New(rand.NewPCG(calSeed, calSeed))
	doc, err := calDocTokens(eng, rng)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	g, err := calGroup(eng, rng, doc, calShapes[0], 0, eng.Info().MaxTokens)
	if err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if _, err := forward(ctx, []*scorer.Group{g}); err != nil {
		return fmt.Errorf("warm-up pass: %w", err)
	}
	return nil
}

// calibrate times forward passes of eng on synthetic prompts of the calShapes, round after round,
// until calRounds are done or the budget is spent, and fits the cost formula to them
// (costmodel.Fit). The first pass, the tiny shape, is a warm-up and not fitted (first-touch
// costs). The budget bounds every pass through its context: the pass running when it ends is
// cancelled and not fitted. No pass is predicted and skipped: the prior is only a guess (its
// per-batch term can be 20× off), and a wrong prediction would skip exactly the passes that
// tell the terms apart. The fit needs 4 passes of 3 shapes at least. now is the clock; forward
// runs one pass (the scheduler's, which turns an engine panic into an error).
func calibrate(ctx context.Context, eng scorer.Engine, budget time.Duration, now func() time.Time,
	forward func(context.Context, []*scorer.Group) (scorer.ForwardStats, error)) (cal calibration) {
	t0 := now()
	defer func() { cal.Took = now().Sub(t0) }()

	info := eng.Info()
	rng := rand.New(rand.NewPCG(calSeed, calSeed))
	doc, err := calDocTokens(eng, rng)
	if err != nil {
		cal.Err = fmt.Errorf("calibration: %w", err)
		return cal
	}
	var samples []costmodel.Sample
	seen := make([]bool, len(calShapes))
	plan := []int{0} // the warm-up
	for range calRounds {
		for i := range calShapes {
			plan = append(plan, i)
		}
	}
	for k, si := range plan {
		left := budget - now().Sub(t0)
		if left <= 0 {
			break
		}
		g, err := calGroup(eng, rng, doc, calShapes[si], k, info.MaxTokens)
		if err != nil {
			cal.Err = fmt.Errorf("calibration: %w", err)
			return cal
		}
		groups := []*scorer.Group{g}
		f := eng.CostFeatures(groups)
		pctx, cancel := context.WithTimeout(ctx, left)
		start := now()
		st, err := forward(pctx, groups)
		wall := now().Sub(start)
		cancel()
		if ctxErr := ctx.Err(); ctxErr != nil {
			cal.Err = fmt.Errorf("calibration: %w", ctxErr)
			return cal
		}
		if errors.Is(err, context.DeadlineExceeded) {
			break // the budget ran out during the pass
		}
		if err != nil {
			cal.Err = fmt.Errorf("calibration pass %d: %w", k, err)
			return cal
		}
		if st.Features != (costmodel.Features{}) {
			f = st.Features
		}
		y := passSeconds(st, wall)
		if k > 0 && y > 0 {
			samples = append(samples, costmodel.Sample{Features: f, Seconds: y})
			seen[si] = true
		}
	}
	cal.Passes = len(samples)
	shapes := 0
	for _, ok := range seen {
		if ok {
			shapes++
		}
	}
	if len(samples) < 4 || shapes < 3 {
		cal.Err = fmt.Errorf("calibration: %d passes of %d shapes in the budget of %v, want at least 4 of 3", len(samples), shapes, budget)
		return cal
	}
	// b measured apart when the engine can time its attention (a and c fitted around it,
	// costmodel.FitWithB), else fitted with the rest.
	if pt, ok := eng.(pairTimer); ok {
		if b, perr := pt.PairSeconds(ctx); perr == nil {
			cal.PairSeconds = b
		}
	}
	var fit costmodel.FitResult
	if cal.PairSeconds > 0 {
		fit, err = costmodel.FitWithB(samples, cal.PairSeconds)
	} else {
		fit, err = costmodel.Fit(samples)
	}
	if err == nil && fit.Coeffs.A == 0 && fit.Coeffs.B == 0 && fit.Coeffs.C == 0 {
		err = errors.New("all coefficients are zero")
	}
	if err != nil {
		cal.Err = fmt.Errorf("calibration: %w", err)
		return cal
	}
	cal.Fit = fit
	return cal
}

// calDocTokens tokenizes one long synthetic document: items are slices of it.
func calDocTokens(eng scorer.Engine, rng *rand.Rand) ([]int32, error) {
	longest := 0
	for _, sh := range calShapes {
		longest = max(longest, sh.itemTokens)
	}
	g, err := eng.Tokenize("", "calibration", []string{calText(rng, 2*longest)}, scorer.TokenizeOptions{})
	if err != nil {
		return nil, err
	}
	if len(g.Items) != 1 || len(g.Items[0]) == 0 {
		return nil, fmt.Errorf("tokenize: %d items for 1 document", len(g.Items))
	}
	return g.Items[0], nil
}

// calGroup builds the k-th pass's group: a unique query (so no prefix comes from the cache) and
// items cut from doc, shortened where the engine's prompt limit requires.
func calGroup(eng scorer.Engine, rng *rand.Rand, doc []int32, sh calShape, k, maxTokens int) (*scorer.Group, error) {
	q := fmt.Sprintf("calibration pass %d: %s", k, calText(rng, sh.queryWords))
	g, err := eng.Tokenize("", q, []string{"x"}, scorer.TokenizeOptions{})
	if err != nil {
		return nil, err
	}
	l := min(sh.itemTokens, len(doc))
	if maxTokens > 0 {
		l = min(l, maxTokens-len(g.Prefix))
	}
	if l < 1 {
		return nil, fmt.Errorf("prompt limit %d leaves no room for items after a %d-token prefix", maxTokens, len(g.Prefix))
	}
	out := &scorer.Group{Prefix: g.Prefix, Truncated: make([]int, sh.items), TooLong: make([]bool, sh.items)}
	for range sh.items {
		off := rng.IntN(len(doc) - l + 1)
		out.Items = append(out.Items, doc[off:off+l])
	}
	return out, nil
}

func calText(rng *rand.Rand, words int) string {
	w := make([]string, words)
	for i := range w {
		w[i] = calWords[rng.IntN(len(calWords))]
	}
	return strings.Join(w, " ")
}
