package tokenizer

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

var calibrate = flag.Bool("calibrate", false, "print the weights that TestEstimateWeightsAreFitted fits for EstimateTokens")

// estimateCorpus is product text of varied lengths (20 B – 4 KB) plus single-language slices,
// from seeds disjoint for calibration (base 0) and evaluation (base 1_000_000).
func estimateCorpus(base uint64, n int) []string {
	r := rand.New(rand.NewPCG(base, 7))
	out := make([]string, 0, n)
	for i := range n {
		s := productText(base+uint64(i), 20+r.IntN(4000))
		switch i % 10 {
		case 0: // English-only words and numbers
			s = strings.Map(func(c rune) rune {
				if c >= 0x80 {
					return -1
				}
				return c
			}, s)
		case 1: // Chinese-heavy: drop ASCII letters
			s = strings.Map(func(c rune) rune {
				if c < 0x80 && (c|0x20 >= 'a' && c|0x20 <= 'z') {
					return -1
				}
				return c
			}, s)
		}
		if strings.TrimSpace(s) != "" {
			out = append(out, s)
		}
	}
	return out
}

// proseParagraphs returns every other paragraph (half = 0 or 1) of this package's sources and
// SOURCE.md: English prose and code, unlike the product corpus. Half 0 calibrates, half 1 tests.
func proseParagraphs(tb testing.TB, half int) []string {
	tb.Helper()
	files, err := filepath.Glob("*.go")
	if err != nil {
		tb.Fatal(err)
	}
	slices.Sort(files)
	var out []string
	k := 0
	for _, f := range append(files, "assets/SOURCE.md") {
		data, err := os.ReadFile(f)
		if err != nil {
			tb.Fatal(err)
		}
		for _, para := range strings.Split(string(data), "\n\n") {
			if len(para) < 40 {
				continue
			}
			if k%2 == half {
				out = append(out, para)
			}
			k++
		}
	}
	return out
}

// relErrors returns |estimate − exact| / exact for each text.
func relErrors(tb testing.TB, tok *Tokenizer, texts []string) []float64 {
	tb.Helper()
	errs := make([]float64, 0, len(texts))
	for _, s := range texts {
		exact := len(tok.EncodePlain(s))
		if exact == 0 {
			continue
		}
		errs = append(errs, math.Abs(float64(EstimateTokens(s)-exact))/float64(exact))
	}
	return errs
}

func meanP99(errs []float64) (mean, p99 float64) {
	s := slices.Clone(errs)
	slices.Sort(s)
	for _, e := range s {
		mean += e
	}
	return mean / float64(len(s)), s[int(math.Ceil(0.99*float64(len(s))))-1]
}

// TestEstimateAccuracy measures EstimateTokens against Encode on held-out product text. The
// figures go in the note; the bounds catch a broken estimator (or stale weights after a change).
func TestEstimateAccuracy(t *testing.T) {
	tok := defaultTB(t)
	errs := relErrors(t, tok, estimateCorpus(1_000_000, 1000))
	mean, p99 := meanP99(errs)
	t.Logf("EstimateTokens on %d held-out product texts: mean relative error %.1f%%, p99 %.1f%%", len(errs), 100*mean, 100*p99)
	if mean > 0.06 || p99 > 0.25 {
		t.Errorf("estimator error too high: mean %.3f (max 0.06), p99 %.3f (max 0.25)", mean, p99)
	}
	prose := proseParagraphs(t, 1)
	pmean, pp99 := meanP99(relErrors(t, tok, prose))
	t.Logf("EstimateTokens on %d paragraphs of English prose/Go code: mean relative error %.1f%%, p99 %.1f%%", len(prose), 100*pmean, 100*pp99)
	if pmean > 0.20 {
		t.Errorf("estimator error on prose too high: mean %.3f", pmean)
	}
	// Short and degenerate inputs stay sane.
	for _, tc := range []struct {
		text     string
		min, max int
	}{
		{"", 0, 0}, {"a", 1, 1}, {"Hello world", 1, 3}, {"12345", 5, 5}, {"你好世界", 2, 4}, {"   ", 1, 2},
	} {
		if got := EstimateTokens(tc.text); got < tc.min || got > tc.max {
			t.Errorf("EstimateTokens(%q) = %d, want in [%d, %d]", tc.text, got, tc.min, tc.max)
		}
	}
}

// TestEstimateWeightsAreFitted: the committed weights do about as well as a fresh fit on the
// calibration half of the corpus (fitEstimateWeights): on the held-out product texts their mean
// relative error is at most half a point above the refit's (two points on prose). After
// changing the features, run go test -run EstimateWeightsAreFitted -v ./tokenizer -args
// -calibrate and paste the weights it prints into estimate.go.
func TestEstimateWeightsAreFitted(t *testing.T) {
	if raceEnabled && !*calibrate {
		t.Skip("tokenizing the corpus takes ~15 s under the race detector; the plain and purego runs check the weights")
	}
	tok := defaultTB(t)
	committed := estimateWeights
	t.Cleanup(func() { estimateWeights = committed })
	products, prose := estimateCorpus(1_000_000, 1000), proseParagraphs(t, 1)
	meanErrors := func(w [numFeatures]float64) (product, proseMean float64) {
		estimateWeights = w
		product, _ = meanP99(relErrors(t, tok, products))
		proseMean, _ = meanP99(relErrors(t, tok, prose))
		return product, proseMean
	}
	fitted := fitEstimateWeights(t, tok)
	fitProduct, fitProse := meanErrors(fitted)
	gotProduct, gotProse := meanErrors(committed)
	if *calibrate {
		var b strings.Builder
		for i, x := range fitted {
			fmt.Fprintf(&b, "\t%d: %.4f,\n", i, x)
		}
		t.Logf("fitted weights:\n%s", b.String())
		t.Logf("held-out mean relative error, fitted: product %.2f%%, prose %.2f%%; committed: product %.2f%%, prose %.2f%%",
			100*fitProduct, 100*fitProse, 100*gotProduct, 100*gotProse)
	}
	// The prose is this package's own source, so it changes with every edit here: it gets more
	// slack than the seeded product corpus.
	const productSlack, proseSlack = 0.005, 0.02
	if gotProduct > fitProduct+productSlack || gotProse > fitProse+proseSlack {
		t.Errorf("committed weights: held-out mean error product %.2f%%, prose %.2f%%; a refit gets %.2f%%, %.2f%% (refit with -calibrate)",
			100*gotProduct, 100*gotProse, 100*fitProduct, 100*fitProse)
	}
}

// fitEstimateWeights fits EstimateTokens' weights on the calibration half of the corpus by least
// squares on relative error: minimise Σ ((w·f − y)/y)², i.e. rows f/y against target 1.
func fitEstimateWeights(tb testing.TB, tok *Tokenizer) [numFeatures]float64 {
	tb.Helper()
	texts := append(estimateCorpus(0, 3000), proseParagraphs(tb, 0)...)
	var ata [numFeatures][numFeatures]float64
	var atb [numFeatures]float64
	for _, s := range texts {
		y := float64(len(tok.EncodePlain(s)))
		f := estimateFeatures(s, 0, nil)
		// Digits are exactly one token each; non-CJK, non-ASCII letters are too rare in the
		// corpus to fit. Their weights are fixed and the rest is fitted on what remains.
		target := y
		for i, w := range fixedWeights {
			target -= w * f[i]
			f[i] = 0
		}
		target /= y
		for i := range f {
			f[i] /= y
		}
		for i := range numFeatures {
			atb[i] += f[i] * target
			for j := range numFeatures {
				ata[i][j] += f[i] * f[j]
			}
		}
	}
	for i := range numFeatures {
		ata[i][i] += 1e-6 // ridge: a feature absent from the corpus keeps a finite weight
	}
	w := solve(ata, atb)
	for i, x := range fixedWeights {
		w[i] = x
	}
	return w
}

var fixedWeights = map[int]float64{featDigits: 1, featOtherLetters: 0.5}

// solve solves a·x = b by Gaussian elimination with partial pivoting.
func solve(a [numFeatures][numFeatures]float64, b [numFeatures]float64) [numFeatures]float64 {
	const n = numFeatures
	for c := range n {
		p := c
		for r := c + 1; r < n; r++ {
			if math.Abs(a[r][c]) > math.Abs(a[p][c]) {
				p = r
			}
		}
		a[c], a[p] = a[p], a[c]
		b[c], b[p] = b[p], b[c]
		for r := c + 1; r < n; r++ {
			k := a[r][c] / a[c][c]
			for j := c; j < n; j++ {
				a[r][j] -= k * a[c][j]
			}
			b[r] -= k * b[c]
		}
	}
	var x [n]float64
	for r := n - 1; r >= 0; r-- {
		s := b[r]
		for j := r + 1; j < n; j++ {
			s -= a[r][j] * x[j]
		}
		x[r] = s / a[r][r]
	}
	return x
}

// TestEstimateTokensRunsCountsLongRunsExactly: every maximal run of at least minRun ASCII bytes
// of one class (word bytes; other ASCII) goes to exact, whole, and only those; the rest is
// estimated as EstimateTokens estimates it.
func TestEstimateTokensRunsCountsLongRunsExactly(t *testing.T) {
	b64 := "QmFzZTY0IGlzIGEgZ3JvdXAgb2Y="
	dots := strings.Repeat(".", 20)
	text := "short words " + b64 + " then dots" + dots + "1 é " + strings.Repeat("-", 16) + "中文" + dots
	var got []string
	n := EstimateTokensRuns(text, 16, func(run string) int {
		got = append(got, run)
		return 1000
	})
	// The dots follow a letter, so their run starts at the first dot; the 16 dashes are word
	// bytes; the run that ends the text counts.
	want := []string{b64, dots, strings.Repeat("-", 16), dots}
	if !slices.Equal(got, want) {
		t.Errorf("runs %q, want %q", got, want)
	}
	est := EstimateTokens(text)
	for _, r := range want {
		est += 1000 - EstimateTokens(r)
	}
	if n != est {
		t.Errorf("count %d, want %d", n, est)
	}
	if EstimateTokensRuns(text, 16, func(string) int { return 0 }) < 0 {
		t.Error("negative count")
	}
}
