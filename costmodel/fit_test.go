package costmodel

import (
	"math"
	"math/rand/v2"
	"testing"
)

func within(t *testing.T, name string, got, want, tol float64) {
	t.Helper()
	if math.Abs(got-want) > tol*want {
		t.Errorf("%s = %.4g, want %.4g ± %.0f%%", name, got, want, 100*tol)
	}
}

// grid samples the design calibration uses (prefix × item count × item length), three times,
// from known coefficients with multiplicative log-normal noise σ.
func grid(c Coeffs, sigma float64, seed uint64) []Sample {
	r := rand.New(rand.NewPCG(seed, 1))
	var out []Sample
	for range 3 {
		for _, p := range []int{66, 140, 300} {
			for _, n := range []int{1, 4, 8} {
				for _, l := range []int{32, 96, 256} {
					items := make([]int, n)
					for i := range items {
						items[i] = l + r.IntN(10)
					}
					f := BatchFeatures(p, items, false)
					out = append(out, Sample{Features: f, Seconds: c.Seconds(f) * math.Exp(sigma*r.NormFloat64())})
				}
			}
		}
	}
	return out
}

func TestFitRecoversCoefficients(t *testing.T) {
	tests := []struct {
		name  string
		c     Coeffs
		sigma float64
		tol   float64
	}{
		{"exact", Coeffs{A: 2e-4, B: 3e-8, C: 5e-3}, 0, 1e-6},
		{"noisy", Coeffs{A: 2e-4, B: 3e-8, C: 5e-3}, 0.05, 0.3},
		{"no attention term", Coeffs{A: 1e-4, C: 2e-3}, 0, 1e-6},
		{"small node", Coeffs{A: 2.4e-4, B: 1.1e-7, C: 0.012}, 0.1, 0.35},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f, err := Fit(grid(tt.c, tt.sigma, 7))
			if err != nil {
				t.Fatal(err)
			}
			within(t, "a", f.Coeffs.A, tt.c.A, tt.tol)
			within(t, "c", f.Coeffs.C, tt.c.C, tt.tol)
			if tt.c.B == 0 {
				if f.Coeffs.B > 1e-12 {
					t.Errorf("b = %g, want 0", f.Coeffs.B)
				}
			} else {
				within(t, "b", f.Coeffs.B, tt.c.B, tt.tol)
			}
			within(t, "sigma", f.Sigma+1e-9, tt.sigma+1e-9, 0.35)
			if f.R2 < 0.95 {
				t.Errorf("R² = %.3f", f.R2)
			}
			// Whatever the split between terms, predictions must hold on the design.
			if lim := 5*tt.sigma + 1e-6; f.MaxRelErr > math.Exp(lim)-1 {
				t.Errorf("max relative error %.3f > %.3f", f.MaxRelErr, math.Exp(lim)-1)
			}
		})
	}
}

func TestFitNonNegative(t *testing.T) {
	// Data that an unconstrained fit explains with a negative batch overhead.
	var s []Sample
	for _, n := range []int{1, 2, 4, 8, 16} {
		items := make([]int, n)
		for i := range items {
			items[i] = 100
		}
		s = append(s, Sample{Features: BatchFeatures(10, items, false), Seconds: 1e-3*float64(n) - 4e-4 + 1e-5})
	}
	f, err := Fit(s)
	if err != nil {
		t.Fatal(err)
	}
	if f.Coeffs.A < 0 || f.Coeffs.B < 0 || f.Coeffs.C < 0 {
		t.Fatalf("negative coefficient %+v", f.Coeffs)
	}
}

func TestFitRejects(t *testing.T) {
	ok := grid(Coeffs{A: 1e-4, B: 1e-8, C: 1e-3}, 0, 1)
	tests := []struct {
		name    string
		samples []Sample
	}{
		{"too few", ok[:3]},
		{"zero time", append(append([]Sample(nil), ok[:5]...), Sample{Features: ok[0].Features})},
		{"NaN time", append(append([]Sample(nil), ok[:5]...), Sample{Features: ok[0].Features, Seconds: math.NaN()})},
		{"no features", []Sample{{Seconds: 1}, {Seconds: 1}, {Seconds: 2}, {Seconds: 1}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if f, err := Fit(tt.samples); err == nil {
				t.Errorf("no error; fit %+v", f)
			}
		})
	}
}

// TestFitWithBKeepsTheMeasuredB: with b measured apart, a and c are fitted to what is left of
// each sample, exactly on exact samples and within the noise on noisy ones, and b is the one
// given; on a design of short passes where the attended pairs are a few per cent of the time,
// Fit alone lets noise decide b. A negative or infinite b is refused.
func TestFitWithBKeepsTheMeasuredB(t *testing.T) {
	c := Coeffs{A: 6.5e-4, B: 4.2e-7, C: 7e-3}
	// Short passes, as a start-up calibration can afford: pairs are ≤ 10 % of each one's time.
	var short []Sample
	r := rand.New(rand.NewPCG(3, 3))
	for range 4 {
		for _, sh := range [][2]int{{70, 16}, {70, 24}, {190, 24}, {70, 96}} {
			items := []int{sh[1], sh[1]}
			f := BatchFeatures(sh[0], items, false)
			short = append(short, Sample{Features: f, Seconds: c.Seconds(f) * math.Exp(0.1*r.NormFloat64())})
		}
	}
	f, err := FitWithB(short, c.B)
	if err != nil {
		t.Fatal(err)
	}
	if f.Coeffs.B != c.B {
		t.Errorf("b = %g, want the given %g", f.Coeffs.B, c.B)
	}
	within(t, "a", f.Coeffs.A, c.A, 0.2)
	// A document at the prompt limit: priced within 20 % with the measured b.
	long := BatchFeatures(70, []int{8100}, false)
	within(t, "seconds of an 8,100-token item", f.Coeffs.Seconds(long), c.Seconds(long), 0.2)

	exact := grid(c, 0, 5)
	f, err = FitWithB(exact, c.B)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "a (exact)", f.Coeffs.A, c.A, 1e-6)
	within(t, "c (exact)", f.Coeffs.C, c.C, 1e-6)

	for _, b := range []float64{-1e-9, math.Inf(1), math.NaN()} {
		if _, err := FitWithB(exact, b); err == nil {
			t.Errorf("b = %v: no error", b)
		}
	}
}
