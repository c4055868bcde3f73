package emulated

import (
	"context"
	"math"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/scorer"
)

// shapeTokenize builds groups of exact token counts: the query is the prefix length, each
// document's length in bytes is its item's length in tokens.
func shapeTokenize(_, query string, docs []string, _ scorer.TokenizeOptions) (*scorer.Group, error) {
	p, err := strconv.Atoi(query)
	if err != nil {
		return nil, err
	}
	g := &scorer.Group{Prefix: make([]int32, p), Items: make([][]int32, len(docs)), Truncated: make([]int, len(docs)), TooLong: make([]bool, len(docs))}
	for i, d := range docs {
		g.Items[i] = make([]int32, len(d))
		for j := range g.Items[i] {
			g.Items[i][j] = int32(p + j) // distinct prompts: the logits need not matter here
		}
	}
	return g, nil
}

func docs(n, l int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = strings.Repeat("x", l)
	}
	return out
}

// powerLaw is a non-linear engine: time ∝ (tokens computed)^1.3.
func powerLaw(p, n, l int) float64 { return 2e-5 * math.Pow(float64(p+n*l), 1.3) }

// powerLawProfile measures powerLaw on a grid with 3 repetitions of ±4 % spread and fits the
// formula to it, as `bench calibrate` would.
func powerLawProfile(t testing.TB) *costmodel.Profile {
	t.Helper()
	spread := []float64{0.96, 1.0, 1.04}
	var prof costmodel.Profile
	var fs []costmodel.Sample
	for _, p := range []int{20, 60, 200} {
		for _, n := range []int{1, 4, 16} {
			for _, l := range []int{16, 32, 64, 128, 256, 512} {
				m := costmodel.MeasuredShape{PrefixTokens: p, ItemTokens: make([]int, n)}
				for i := range m.ItemTokens {
					m.ItemTokens[i] = l
				}
				for _, s := range spread {
					m.Seconds = append(m.Seconds, s*powerLaw(p, n, l))
					fs = append(fs, costmodel.Sample{Features: m.Features(), Seconds: s * powerLaw(p, n, l)})
				}
				prof.Measured = append(prof.Measured, m)
			}
		}
	}
	fit, err := costmodel.Fit(fs)
	if err != nil {
		t.Fatal(err)
	}
	prof.Coeffs, prof.NoiseSigma = fit.Coeffs, fit.Sigma
	if err := prof.Validate(); err != nil {
		t.Fatal(err)
	}
	return &prof
}

func samplesEngine(t testing.TB, prof *costmodel.Profile, seed uint64) (*Engine, *fakeSleep) {
	t.Helper()
	fs := &fakeSleep{}
	e, err := New(Options{Profile: prof, Tokenize: shapeTokenize, Sleep: fs.sleep, Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return e, fs
}

// pass runs one forward pass of a single group and returns the seconds it slept.
func pass(t testing.TB, e *Engine, fs *fakeSleep, p, n, l int) float64 {
	t.Helper()
	g, err := e.Tokenize("", strconv.Itoa(p), docs(n, l), scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.Forward(context.Background(), []*scorer.Group{g}); err != nil {
		t.Fatal(err)
	}
	return fs.slept[len(fs.slept)-1].Seconds()
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[len(s)/2]
}

func TestReplayFollowsMeasuredLawNotFit(t *testing.T) {
	prof := powerLawProfile(t)
	e, fs := samplesEngine(t, prof, 7)
	if mode, n := e.Emulation(); mode != ModeSamples || n != 54 {
		t.Fatalf("Emulation() = %s, %d; want samples, 54", mode, n)
	}
	// Shapes between the measured ones, and at the grid's ends where the linear fit bends away.
	// Inside the grid the replay interpolates measurements (tol 6 %); beyond it (items longer
	// than any measured) it extrapolates with the formula's slope from the nearest edge, so it
	// is only required to beat the fit there.
	tests := []struct {
		name    string
		p, n, l int
		tol     float64 // max |log(replay/law)|
	}{
		{"mid", 40, 8, 90, 0.06},
		{"short items, one", 20, 1, 24, 0.06},
		{"long items, many", 200, 16, 400, 0.06},
		{"long prefix, few", 150, 2, 45, 0.06},
		{"beyond the grid", 100, 12, 700, 0.2},
	}
	var worstReplay, worstFit float64
	for _, tt := range tests {
		var xs []float64
		for range 41 {
			xs = append(xs, pass(t, e, fs, tt.p, tt.n, tt.l))
		}
		items := docsLens(tt.n, tt.l)
		law := powerLaw(tt.p, tt.n, tt.l)
		fit := prof.Seconds(costmodel.BatchFeatures(tt.p, items, false))
		replayErr := math.Abs(math.Log(median(xs) / law))
		fitErr := math.Abs(math.Log(fit / law))
		t.Logf("%-17s law %.4fs  replay median %.4fs (%+.1f%%)  fit %.4fs (%+.1f%%)", tt.name, law, median(xs), 100*(median(xs)/law-1), fit, 100*(fit/law-1))
		if replayErr > tt.tol || replayErr > fitErr {
			t.Errorf("%s: replayed median %.4fs is %.1f%% off the measured law %.4fs", tt.name, median(xs), 100*(math.Exp(replayErr)-1), law)
		}
		worstReplay, worstFit = max(worstReplay, replayErr), max(worstFit, fitErr)
	}
	if worstFit < 3*worstReplay || worstFit < 0.15 {
		t.Errorf("worst log error: replay %.3f, fit %.3f: want the fit ≥ 3× worse and ≥ 0.15 (else the test does not tell them apart)", worstReplay, worstFit)
	}
}

func docsLens(n, l int) []int {
	out := make([]int, n)
	for i := range out {
		out[i] = l
	}
	return out
}

func TestReplayMeasuredShapeReproducesItsDistribution(t *testing.T) {
	prof := powerLawProfile(t)
	e, fs := samplesEngine(t, prof, 3)
	want := prof.Measured[7] // one measured shape
	count := map[float64]int{}
	for range 300 {
		got := pass(t, e, fs, want.PrefixTokens, len(want.ItemTokens), want.ItemTokens[0])
		// The sleep is a time.Duration: nanosecond resolution.
		matched := false
		for _, s := range want.Seconds {
			if math.Abs(got-s) < 2e-9 {
				count[s]++
				matched = true
			}
		}
		if !matched {
			t.Fatalf("replayed %.9fs, not one of the shape's repetitions %v", got, want.Seconds)
		}
	}
	for _, s := range want.Seconds {
		if count[s] < 60 { // each of 3 repetitions ≈ 100 of 300
			t.Errorf("repetition %.6fs drawn %d times of 300, want about 100", s, count[s])
		}
	}
}

func TestReplaySeeded(t *testing.T) {
	prof := powerLawProfile(t)
	run := func(seed uint64) []time.Duration {
		e, fs := samplesEngine(t, prof, seed)
		for i := range 20 {
			pass(t, e, fs, 30+i, 1+i%5, 50+7*i)
		}
		return fs.slept
	}
	a, b, c := run(11), run(11), run(12)
	if !slices.Equal(a, b) {
		t.Errorf("same seed, different times:\n%v\n%v", a, b)
	}
	if slices.Equal(a, c) {
		t.Errorf("seeds 11 and 12 gave the same times")
	}
}

func TestReplayMergedAndCachedPasses(t *testing.T) {
	prof := powerLawProfile(t)
	e, fs := samplesEngine(t, prof, 5)
	one := pass(t, e, fs, 60, 4, 128)
	g1, _ := e.Tokenize("", "60", docs(4, 128), scorer.TokenizeOptions{})
	g2, _ := e.Tokenize("", "61", docs(4, 128), scorer.TokenizeOptions{})
	if _, err := e.Forward(context.Background(), []*scorer.Group{g1, g2}); err != nil {
		t.Fatal(err)
	}
	two := fs.slept[len(fs.slept)-1].Seconds()
	if r := two / one; r < 1.5 || r > 2.6 {
		t.Errorf("two merged groups took %.2f× one group, want about 2×", r)
	}
	// The same prefix twice in one pass: the second reuses it, so the pass costs less than two.
	g3, _ := e.Tokenize("", "60", docs(4, 128), scorer.TokenizeOptions{})
	g4, _ := e.Tokenize("", "60", docs(4, 128), scorer.TokenizeOptions{})
	if _, err := e.Forward(context.Background(), []*scorer.Group{g3, g4}); err != nil {
		t.Fatal(err)
	}
	if reused := fs.slept[len(fs.slept)-1].Seconds(); !(reused > 0) || reused > two*1.05 {
		t.Errorf("pass with a reused prefix took %.4fs, want > 0 and ≤ the pass without (%.4fs)", reused, two)
	}
}

func TestFormulaModeWithoutSamples(t *testing.T) {
	e, _ := newEngine(t, nil)
	if mode, n := e.Emulation(); mode != ModeFormula || n != 0 {
		t.Errorf("Emulation() = %s, %d; want formula, 0", mode, n)
	}
	if k := e.Info().Kernels; k != "emulation: formula" {
		t.Errorf("Info().Kernels = %q", k)
	}
	prof := powerLawProfile(t)
	s, _ := samplesEngine(t, prof, 1)
	if k := s.Info().Kernels; k != "emulation: samples (54 shapes, 162 passes)" {
		t.Errorf("Info().Kernels = %q", k)
	}
}

func TestReplaySingleRepetitionsBorrowSpread(t *testing.T) {
	prof := powerLawProfile(t)
	for i := range prof.Measured { // keep one repetition per shape, as a --repeats 1 calibration
		prof.Measured[i].Seconds = prof.Measured[i].Seconds[1:2]
	}
	e, fs := samplesEngine(t, prof, 9)
	m := prof.Measured[10]
	seen := map[time.Duration]bool{}
	for range 50 {
		pass(t, e, fs, m.PrefixTokens, len(m.ItemTokens), m.ItemTokens[0])
		seen[fs.slept[len(fs.slept)-1]] = true
	}
	if len(seen) < 5 {
		t.Errorf("a once-measured shape replayed %d distinct times in 50 passes, want a spread", len(seen))
	}
}

func TestCommittedSamplesProfile(t *testing.T) {
	prof, err := costmodel.LoadProfile("../../bench/results/profile-small-auto-samples.json")
	if err != nil {
		t.Fatal(err)
	}
	e, err := New(Options{Profile: prof, Sleep: (&fakeSleep{}).sleep, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if mode, n := e.Emulation(); mode != ModeSamples || n != len(prof.Measured) || n < 20 {
		t.Errorf("Emulation() = %s, %d; want samples with the profile's %d shapes", mode, n, len(prof.Measured))
	}
	old, err := costmodel.LoadProfile("../../bench/results/profile-small-auto.json")
	if err != nil {
		t.Fatal(err)
	}
	if old.Coeffs != prof.Coeffs || len(old.Measured) != 0 {
		t.Errorf("coefficients-only profile: %+v, samples profile coefficients %+v", old.Coeffs, prof.Coeffs)
	}
}
