package kernels

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// randExperts builds nE experts of the given shape with weights of scale ~1/sqrt(fan-in).
func randExperts(tb testing.TB, rng *rand.Rand, nE, hidden, inter int, dt DType) []Expert {
	tb.Helper()
	mk := func(n, k int) *Weight {
		w := make([]float32, n*k)
		s := 1 / math.Sqrt(float64(k))
		for i := range w {
			w[i] = float32(rng.NormFloat64() * s)
		}
		if dt == BF16 {
			b := make([]uint16, len(w))
			F32ToBF16(b, w)
			return NewWeightBF16(b, n, k)
		}
		return NewWeightF32(w, n, k)
	}
	ex := make([]Expert, nE)
	for e := range ex {
		ex[e] = Expert{Gate: mk(inter, hidden), Up: mk(inter, hidden), Down: mk(hidden, inter)}
	}
	return ex
}

func randVec(rng *rand.Rand, n int) []float32 {
	v := make([]float32, n)
	for i := range v {
		v[i] = float32(rng.NormFloat64())
	}
	return v
}

// routingFromCounts routes counts[e] distinct random tokens of nTok to expert e.
func routingFromCounts(rng *rand.Rand, nTok int, counts []int) *Routing {
	r := &Routing{Tokens: make([][]int32, len(counts)), Weights: make([][]float32, len(counts))}
	for e, c := range counts {
		for _, t := range rng.Perm(nTok)[:c] {
			r.Tokens[e] = append(r.Tokens[e], int32(t))
			r.Weights[e] = append(r.Weights[e], rng.Float32())
		}
	}
	return r
}

// closeTo reports the first index where got and want differ by more than tol relative to the
// largest magnitude of want, or -1.
func closeTo(got, want []float32, tol float64) int {
	var scale float64
	for _, w := range want {
		scale = max(scale, math.Abs(float64(w)))
	}
	scale = max(scale, 1e-6)
	for i := range want {
		if d := math.Abs(float64(got[i] - want[i])); d > tol*scale || math.IsNaN(float64(got[i])) {
			return i
		}
	}
	return -1
}

func TestMoEVariantsMatchReference(t *testing.T) {
	const hidden, inter = 40, 72 // not multiples of 64: column blocks and tails are ragged
	tests := []struct {
		name   string
		nTok   int
		counts []int // nil: a synthetic routing of nTok tokens, 6 experts, top-2
	}{
		{name: "one token", nTok: 1, counts: []int{0, 1, 0, 0, 0, 0}},
		{name: "empty experts", nTok: 40, counts: []int{0, 0, 17, 0, 40, 0}},
		{name: "ragged", nTok: 300, counts: []int{1, 15, 16, 17, 63, 129}},
		{name: "beyond one exact item", nTok: 400, counts: []int{193, 400, 2, 0, 31, 65}},
		{name: "synthetic top-2", nTok: 97},
	}
	for _, dt := range []DType{F32, BF16} {
		for _, tc := range tests {
			rng := rand.New(rand.NewPCG(7, uint64(len(tc.name))))
			experts := randExperts(t, rng, 6, hidden, inter, dt)
			var rt *Routing
			if tc.counts == nil {
				var err error
				if rt, err = SyntheticRouting(tc.nTok, 6, 2, 0.5, 3); err != nil {
					t.Fatal(err)
				}
			} else {
				rt = routingFromCounts(rng, tc.nTok, tc.counts)
			}
			x := randVec(rng, tc.nTok*hidden)
			base := randVec(rng, tc.nTok*hidden) // MoE adds to out
			want := append([]float32(nil), base...)
			refStats := moeReference(want, x, hidden, experts, rt)
			for _, thr := range []int{1, 3} {
				for _, v := range MoEVariants() {
					name := tc.name + "/" + dt.String() + "/" + v.String()
					t.Run(name, func(t *testing.T) {
						defer SetThreads(Threads())
						SetThreads(thr)
						got := append([]float32(nil), base...)
						r := NewMoERunner(MoEPolicy{Kind: PolicyFixed, Variant: v})
						// Twice through the same runner: the second call reuses scratch that holds
						// the first call's data, which must not leak into the result.
						for range 2 {
							copy(got, base)
							st, err := r.Run(got, x, hidden, experts, rt)
							if err != nil {
								t.Fatal(err)
							}
							if i := closeTo(got, want, 1e-5); i >= 0 {
								t.Fatalf("threads %d: out[%d] = %v, want %v", thr, i, got[i], want[i])
							}
							wantSt := MoEStats{Variant: v.String(), BlockM: v.BlockM(), Rows: refStats.Rows,
								PaddingRatio: 1, Policy: r.Policy().String()}
							if b := v.BlockM(); b > 0 {
								wantSt.PaddingRatio = PaddingRatio(RoutingCounts(rt), b)
							}
							if diff := cmp.Diff(wantSt, st); diff != "" {
								t.Errorf("stats (-want +got):\n%s", diff)
							}
						}
					})
				}
			}
		}
	}
}

func TestMoEPackageDefault(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 1))
	experts := randExperts(t, rng, 4, 16, 24, F32)
	rt := routingFromCounts(rng, 20, []int{3, 0, 20, 7})
	x := randVec(rng, 20*16)
	want := make([]float32, len(x))
	moeReference(want, x, 16, experts, rt)
	got := make([]float32, len(x))
	st := MoE(got, x, 16, experts, rt)
	if i := closeTo(got, want, 1e-5); i >= 0 {
		t.Fatalf("out[%d] = %v, want %v", i, got[i], want[i])
	}
	if st.Policy != "threshold" || st.Variant != "block64" { // ratio at 128: 384/30 > 1.5
		t.Errorf("stats %+v, want threshold choosing block64", st)
	}

	// A new package policy applies to later calls; dropped scratch is rebuilt.
	prev := DefaultMoERunner()
	defer defaultRunner.Store(prev)
	SetMoEPolicy(MoEPolicy{Kind: PolicyFixed, Variant: VariantExact})
	DefaultMoERunner().ReleaseScratch()
	clear(got)
	st = MoE(got, x, 16, experts, rt)
	if i := closeTo(got, want, 1e-5); i >= 0 {
		t.Fatalf("exact: out[%d] = %v, want %v", i, got[i], want[i])
	}
	if st.Policy != "fixed:exact" || st.Variant != "exact" || st.BlockM != 0 || st.Rows != 30 {
		t.Errorf("stats %+v, want fixed:exact over 30 rows", st)
	}
}

func TestMoEBadInput(t *testing.T) {
	rng := rand.New(rand.NewPCG(2, 2))
	experts := randExperts(t, rng, 2, 8, 4, F32)
	x := randVec(rng, 3*8)
	out := make([]float32, len(x))
	ok := func() *Routing { return routingFromCounts(rng, 3, []int{2, 1}) }
	tests := []struct {
		name    string
		out, x  []float32
		hidden  int
		experts []Expert
		rt      func() *Routing
		want    string
	}{
		{"token out of range", out, x, 8, experts, func() *Routing {
			r := ok()
			r.Tokens[1][0] = 3
			return r
		}, "token 3 out of range"},
		{"negative token", out, x, 8, experts, func() *Routing {
			r := ok()
			r.Tokens[0][0] = -1
			return r
		}, "token -1 out of range"},
		{"weights length", out, x, 8, experts, func() *Routing {
			r := ok()
			r.Weights[0] = r.Weights[0][:1]
			return r
		}, "expert 0: 2 tokens but 1 weights"},
		{"expert count", out, x, 8, experts[:1], ok, "for 1 experts"},
		{"nil routing", out, x, 8, experts, func() *Routing { return nil }, "nil routing"},
		{"x not multiple", out, x[:20], 8, experts, ok, "not a multiple of hidden"},
		{"out length", out[:8], x, 8, experts, ok, "len(out) 8 != len(x) 24"},
		{"hidden mismatch", make([]float32, 24), x, 6, experts, func() *Routing {
			return routingFromCounts(rng, 4, []int{1, 1})
		}, "do not match hidden 6"},
		{"missing weight", out, x, 8, []Expert{experts[0], {Gate: experts[1].Gate}}, ok, "expert 1: missing"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := NewMoERunner(MoEPolicy{}).Run(tc.out, tc.x, tc.hidden, tc.experts, tc.rt())
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("err = %v, want it to contain %q", err, tc.want)
			}
		})
	}
}

func TestParseMoEPolicy(t *testing.T) {
	tests := []struct {
		in   string
		want MoEPolicy
		err  bool
	}{
		{in: "threshold", want: MoEPolicy{Kind: PolicyThreshold}},
		{in: " Auto ", want: MoEPolicy{Kind: PolicyAuto}},
		{in: "fixed:128", want: MoEPolicy{Kind: PolicyFixed, Variant: VariantBlock128}},
		{in: "fixed:64", want: MoEPolicy{Kind: PolicyFixed, Variant: VariantBlock64}},
		{in: "fixed:block32", want: MoEPolicy{Kind: PolicyFixed, Variant: VariantBlock32}},
		{in: "fixed:16", want: MoEPolicy{Kind: PolicyFixed, Variant: VariantBlock16}},
		{in: "fixed:exact", want: MoEPolicy{Kind: PolicyFixed, Variant: VariantExact}},
		{in: "fixed:48", err: true},
		{in: "fixed:", err: true},
		{in: "greedy", err: true},
		{in: "", err: true},
	}
	for _, tc := range tests {
		t.Run(tc.in, func(t *testing.T) {
			got, err := ParseMoEPolicy(tc.in)
			if (err != nil) != tc.err {
				t.Fatalf("err = %v, want error %v", err, tc.err)
			}
			if err != nil {
				return
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("(-want +got):\n%s", diff)
			}
			// The string form parses back to the same policy.
			again, err := ParseMoEPolicy(got.String())
			if err != nil || again != got {
				t.Errorf("round trip of %q: %v, %v", got.String(), again, err)
			}
		})
	}
}

func TestThresholdPolicy(t *testing.T) {
	rep := func(n, c int) []int {
		s := make([]int, c)
		for i := range s {
			s[i] = n
		}
		return s
	}
	tests := []struct {
		name   string
		counts []int
		ratio  float64 // padding ratio at 128, checked so the case stays away from 1.5
		want   MoEVariant
	}{
		{"ratio 1.7", rep(150, 10), 256.0 / 150, VariantBlock64},
		{"ratio 1.2", rep(107, 10), 128.0 / 107, VariantBlock128},
		{"ratio 1.0", rep(128, 3), 1, VariantBlock128},
		{"one small expert", []int{1}, 128, VariantBlock64},
		{"mixed 1.2", []int{128, 128, 64}, 384.0 / 320, VariantBlock128},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r := PaddingRatio(tc.counts, 128)
			if math.Abs(r-tc.ratio) > 1e-9 {
				t.Fatalf("padding ratio %v, want %v", r, tc.ratio)
			}
			if math.Abs(r-ThresholdRatio) < 0.1 {
				t.Fatalf("test ratio %v too close to the threshold", r)
			}
			got, err := NewMoERunner(MoEPolicy{Kind: PolicyThreshold}).Choose(nil, tc.counts)
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("chose %v, want %v", got, tc.want)
			}
		})
	}
}

func TestAutoPicksCheapest(t *testing.T) {
	tests := []struct {
		name   string
		table  MoECostTable
		counts []int
		want   MoEVariant
	}{
		{
			// Tiles cost in proportion to rows: padding decides, the smallest padding wins, and
			// exact has a heavy per-item cost.
			name:   "proportional tiles",
			table:  MoECostTable{TileSeconds: [4]float64{128, 64, 32, 16}, ItemSeconds: 1000, RowSeconds: 1},
			counts: []int{15, 15, 15},
			want:   VariantBlock16, // 3 tiles·16 = 48 vs block32: 3·32, exact: 3·(1000+15)
		},
		{
			name:   "small tiles inefficient",
			table:  MoECostTable{TileSeconds: [4]float64{128, 100, 90, 85}, ItemSeconds: 1000, RowSeconds: 1},
			counts: []int{120, 128},
			want:   VariantBlock128, // 2·128 vs 2·100·2 …
		},
		{
			name:   "exact cheapest",
			table:  MoECostTable{TileSeconds: [4]float64{128, 64, 32, 16}, ItemSeconds: 2, RowSeconds: 1},
			counts: []int{1, 2, 3, 150},
			want:   VariantExact, // 4·2+156 = 164 vs block16: 1+1+1+10 tiles ·16 = 208
		},
		{
			name:   "middle",
			table:  MoECostTable{TileSeconds: [4]float64{200, 70, 60, 50}, ItemSeconds: 500, RowSeconds: 1},
			counts: []int{60, 64, 50},
			want:   VariantBlock64, // 3·70 = 210 vs block32: 6·60 = 360, block128: 600
		}, {
			// The same table as "exact cheapest", but rows cost in 16-row tiles (AMX): exact pays
			// 4·2 + (16+16+16+160) = 216, more than block16's 208.
			name:   "exact rounded to the row granule",
			table:  MoECostTable{TileSeconds: [4]float64{128, 64, 32, 16}, ItemSeconds: 2, RowSeconds: 1, RowGranule: 16},
			counts: []int{1, 2, 3, 150},
			want:   VariantBlock16,
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.table.Cheapest(tc.counts); got != tc.want {
				t.Errorf("Cheapest = %v, want %v", got, tc.want)
			}
			// Brute force agrees, and a runner with the table installed runs that variant.
			best := VariantExact
			for _, v := range MoEVariants() {
				if tc.table.Predict(v, tc.counts) < tc.table.Predict(best, tc.counts) {
					best = v
				}
			}
			if best != tc.want {
				t.Errorf("brute-force minimum %v, want %v", best, tc.want)
			}
			rng := rand.New(rand.NewPCG(3, 3))
			experts := randExperts(t, rng, len(tc.counts), 8, 8, F32)
			r := NewMoERunner(MoEPolicy{Kind: PolicyAuto})
			r.SetCostTable(8, 8, F32, tc.table)
			nTok := 160
			x := randVec(rng, nTok*8)
			st, err := r.Run(make([]float32, len(x)), x, 8, experts, routingFromCounts(rng, nTok, tc.counts))
			if err != nil {
				t.Fatal(err)
			}
			if st.Variant != tc.want.String() || st.Policy != "auto" {
				t.Errorf("Run stats %+v, want auto running %v", st, tc.want)
			}
		})
	}
}

func TestCalibrate(t *testing.T) {
	rng := rand.New(rand.NewPCG(4, 4))
	experts := randExperts(t, rng, 3, 16, 8, BF16)
	r := NewMoERunner(MoEPolicy{Kind: PolicyAuto})
	start := time.Now()
	c, err := r.Calibrate(experts, 50*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el > 5*time.Second {
		t.Errorf("calibration took %v on a tiny layer", el)
	}
	for v, s := range c.TileSeconds {
		if !(s > 0) || math.IsInf(s, 0) {
			t.Errorf("TileSeconds[%v] = %v, want > 0", MoEVariant(v), s)
		}
	}
	if c.ItemSeconds < 0 || c.RowSeconds < 0 || c.ItemSeconds+c.RowSeconds == 0 {
		t.Errorf("exact costs %v + n·%v, want non-negative and not both zero", c.ItemSeconds, c.RowSeconds)
	}
	got, ok := r.CostTable(16, 8, BF16)
	if !ok || got != c {
		t.Errorf("CostTable = %+v, %v; want the calibrated table", got, ok)
	}
	if _, err := r.Calibrate([]Expert{{}}, time.Millisecond); err == nil {
		t.Error("calibrating experts without weights: no error")
	}
}

// memTables is a MoECostTableStore in memory that counts its saves.
type memTables struct {
	mu     sync.Mutex
	tables map[MoEShape]MoECostTable
	saves  int
}

func (m *memTables) Load(s MoEShape) (MoECostTable, bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	c, ok := m.tables[s]
	return c, ok
}

func (m *memTables) Save(s MoEShape, c MoECostTable) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.tables[s] = c
	m.saves++
}

// A table kept for the layer's shape is installed instead of measured; one measured is kept; a
// kept table that is not a valid measurement is measured again.
func TestCalibrateKeptReusesAValidKeptTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	experts := randExperts(t, rng, 3, 16, 8, BF16)
	store := &memTables{tables: map[MoEShape]MoECostTable{}}
	shape := MoEShape{Hidden: 16, Inter: 8, DType: BF16, Experts: 3}

	measured, kept, err := NewMoERunner(MoEPolicy{Kind: PolicyAuto}).CalibrateKept(experts, 20*time.Millisecond, store)
	if err != nil || kept {
		t.Fatalf("first start: kept %v, err %v; want measured", kept, err)
	}
	if got, ok := store.Load(shape); !ok || got != measured || store.saves != 1 {
		t.Fatalf("store holds %+v (%v) after %d saves; want the measured %+v once", got, ok, store.saves, measured)
	}

	r := NewMoERunner(MoEPolicy{Kind: PolicyAuto})
	got, kept, err := r.CalibrateKept(experts, 20*time.Millisecond, store)
	if err != nil || !kept || got != measured || store.saves != 1 {
		t.Fatalf("second start: %+v, kept %v, err %v, saves %d; want the kept table, nothing saved", got, kept, err, store.saves)
	}
	if c, ok := r.CostTable(16, 8, BF16); !ok || c != measured {
		t.Errorf("runner's table %+v (%v), want the kept one", c, ok)
	}

	bad := measured
	bad.TileSeconds[0] = math.NaN()
	store.Save(shape, bad)
	got, kept, err = NewMoERunner(MoEPolicy{Kind: PolicyAuto}).CalibrateKept(experts, 20*time.Millisecond, store)
	if err != nil || kept || got.Validate() != nil || store.saves != 3 {
		t.Errorf("an invalid kept table: %+v, kept %v, err %v, saves %d; want measured again and kept", got, kept, err, store.saves)
	}
}

func TestCostTableValidate(t *testing.T) {
	good := MoECostTable{ItemSeconds: 1e-4, RowSeconds: 0, RowGranule: 1, ItemRows: 32}
	for v := range good.TileSeconds {
		good.TileSeconds[v] = 1e-3
	}
	if err := good.Validate(); err != nil {
		t.Fatalf("a measured-like table: %v", err)
	}
	for name, mutate := range map[string]func(*MoECostTable){
		"zero tile":        func(c *MoECostTable) { c.TileSeconds[1] = 0 },
		"infinite tile":    func(c *MoECostTable) { c.TileSeconds[0] = math.Inf(1) },
		"NaN item":         func(c *MoECostTable) { c.ItemSeconds = math.NaN() },
		"negative row":     func(c *MoECostTable) { c.RowSeconds = -1 },
		"no exact cost":    func(c *MoECostTable) { c.ItemSeconds, c.RowSeconds = 0, 0 },
		"negative granule": func(c *MoECostTable) { c.RowGranule = -16 },
	} {
		c := good
		mutate(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: %+v validated", name, c)
		}
	}
}

func TestFitAffine(t *testing.T) {
	tests := []struct {
		name string
		m, t []float64
		a, b float64
	}{
		{"exact line", []float64{1, 2, 3}, []float64{5, 7, 9}, 3, 2},
		{"negative slope clamps", []float64{1, 2}, []float64{3, 1}, 2, 0},
		{"negative intercept through origin", []float64{1, 2}, []float64{1, 3}, 0, 7.0 / 5},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			a, b := fitAffine(tc.m, tc.t)
			if math.Abs(a-tc.a) > 1e-12 || math.Abs(b-tc.b) > 1e-12 {
				t.Errorf("fit = %v + m·%v, want %v + m·%v", a, b, tc.a, tc.b)
			}
		})
	}
}

func TestSyntheticRouting(t *testing.T) {
	tests := []struct {
		name            string
		nTok, nE, k     int
		s               float64
		ratio128, ratio float64 // expected padding ratio at 128 and 64, ±0.05 (KERNELS-FACTS)
	}{
		{"balanced 4x576", 2304, 128, 8, 0, 1.70, 1.29},
		{"one sequence", 576, 128, 8, 0, 3.56, 1.78},
		{"qwen1.5", 2304, 60, 4, 0, 1.65, 1.24},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			r, err := SyntheticRouting(tc.nTok, tc.nE, tc.k, tc.s, 1)
			if err != nil {
				t.Fatal(err)
			}
			perTok := make([]int, tc.nTok)
			wsum := make([]float32, tc.nTok)
			for e := range r.Tokens {
				for j, tok := range r.Tokens[e] {
					perTok[tok]++
					wsum[tok] += r.Weights[e][j]
				}
			}
			for tok := range perTok {
				if perTok[tok] != tc.k || math.Abs(float64(wsum[tok]-1)) > 1e-5 {
					t.Fatalf("token %d: %d experts, weights sum %v", tok, perTok[tok], wsum[tok])
				}
			}
			c := RoutingCounts(r)
			if got := PaddingRatio(c, 128); math.Abs(got-tc.ratio128) > 0.05 {
				t.Errorf("ratio at 128 = %v, want ≈ %v", got, tc.ratio128)
			}
			if got := PaddingRatio(c, 64); math.Abs(got-tc.ratio) > 0.05 {
				t.Errorf("ratio at 64 = %v, want ≈ %v", got, tc.ratio)
			}
		})
	}
	if _, err := SyntheticRouting(10, 4, 5, 0, 1); err == nil {
		t.Error("topK > experts: no error")
	}
}

// FuzzMoE runs a variant on routings built from the fuzz bytes (one byte per expert: its token
// count) against the reference.
func FuzzMoE(f *testing.F) {
	f.Add([]byte{0, 1, 2}, uint8(0), uint8(1))
	f.Add([]byte{200, 0, 17, 129}, uint8(4), uint8(2))
	f.Add([]byte{16, 16, 16, 16, 16}, uint8(3), uint8(3))
	f.Fuzz(func(t *testing.T, counts []byte, variant, thr uint8) {
		if len(counts) == 0 || len(counts) > 12 {
			return
		}
		v := MoEVariant(variant % uint8(numMoEVariants))
		nTok := 1
		c := make([]int, len(counts))
		for e, b := range counts {
			c[e] = int(b)
			nTok = max(nTok, int(b))
		}
		rng := rand.New(rand.NewPCG(uint64(len(counts)), uint64(counts[0])))
		const hidden, inter = 24, 20
		experts := randExperts(t, rng, len(c), hidden, inter, F32)
		rt := routingFromCounts(rng, nTok, c)
		x := randVec(rng, nTok*hidden)
		want := make([]float32, len(x))
		moeReference(want, x, hidden, experts, rt)
		defer SetThreads(Threads())
		SetThreads(int(thr%3) + 1)
		got := make([]float32, len(x))
		if _, err := NewMoERunner(MoEPolicy{}).RunVariant(v, got, x, hidden, experts, rt); err != nil {
			t.Fatal(err)
		}
		if i := closeTo(got, want, 1e-5); i >= 0 {
			t.Fatalf("%v counts %v: out[%d] = %v, want %v", v, c, i, got[i], want[i])
		}
	})
}

// TestMoERunAllocs checks that a steady stream of MoE calls on one thread allocates nothing
// once the runner's scratch has grown (it used to take a closure per phase, the counts and the
// variant's name per call).
func TestMoERunAllocs(t *testing.T) {
	if activeISA() == isaGeneric {
		t.Skip("the generic reference GEMM allocates a row buffer per call")
	}
	defer SetThreads(Threads())
	SetThreads(1)
	rng := rand.New(rand.NewPCG(5, 6))
	const E, H, I, nTok, k = 8, 64, 48, 40, 2
	experts := make([]Expert, E)
	for e := range experts {
		experts[e] = Expert{
			Gate: NewWeightF32(randVec(rng, I*H), I, H),
			Up:   NewWeightF32(randVec(rng, I*H), I, H),
			Down: NewWeightF32(randVec(rng, H*I), H, I),
		}
	}
	rt := &Routing{Tokens: make([][]int32, E), Weights: make([][]float32, E)}
	for tok := range nTok {
		for _, e := range rng.Perm(E)[:k] {
			rt.Tokens[e] = append(rt.Tokens[e], int32(tok))
			rt.Weights[e] = append(rt.Weights[e], 0.5)
		}
	}
	x := randVec(rng, nTok*H)
	out := make([]float32, nTok*H)
	for _, v := range MoEVariants() {
		r := NewMoERunner(MoEPolicy{Kind: PolicyFixed, Variant: v})
		if _, err := r.Run(out, x, H, experts, rt); err != nil {
			t.Fatal(err)
		}
		if n := testing.AllocsPerRun(10, func() {
			if _, err := r.Run(out, x, H, experts, rt); err != nil {
				t.Fatal(err)
			}
		}); n > 0 {
			t.Errorf("%v: Run allocates %.1f objects per call, want 0", v, n)
		}
	}
}

// TestPlanItems: every row and column of every expert is covered once; each expert's items are
// adjacent (they run while its weights are in cache), experts with more rows computed come
// first, and a block variant's partial last tile, as costly as a full one, stays with its
// expert instead of trailing the queue.
func TestPlanItems(t *testing.T) {
	counts := []int{5, 0, 130, 64, 1}
	tests := []struct {
		name            string
		step, blockM, n int
		workers         int
		wantOrder       []int32
		wantColBlocks   int
	}{
		{name: "block64", step: 64, blockM: 64, n: 256, workers: 1, wantOrder: []int32{2, 0, 3, 4}, wantColBlocks: 2},
		{name: "exact", step: 64, blockM: 0, n: 256, workers: 1, wantOrder: []int32{2, 3, 0, 4}, wantColBlocks: 2},
		{name: "many row items", step: 16, blockM: 16, n: 100, workers: 1, wantOrder: []int32{2, 3, 0, 4}, wantColBlocks: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			items, order := planItems(nil, nil, counts, tc.step, tc.blockM, tc.n, tc.workers)
			if diff := cmp.Diff(tc.wantOrder, order); diff != "" {
				t.Errorf("expert order (-want +got):\n%s", diff)
			}
			covered := make([][]int, len(counts))
			for e := range covered {
				covered[e] = make([]int, counts[e]*tc.n)
			}
			var seen []int32
			for _, it := range items {
				if len(seen) == 0 || seen[len(seen)-1] != it.e {
					if slices.Contains(seen, it.e) {
						t.Fatalf("expert %d's items are not adjacent: %v", it.e, items)
					}
					seen = append(seen, it.e)
				}
				if it.r1-it.r0 > int32(tc.step) {
					t.Errorf("item %+v taller than the step %d", it, tc.step)
				}
				for r := it.r0; r < it.r1; r++ {
					for c := it.n0; c < it.n1; c++ {
						covered[it.e][int(r)*tc.n+int(c)]++
					}
				}
			}
			if diff := cmp.Diff(tc.wantOrder, seen); diff != "" {
				t.Errorf("items' expert order (-want +got):\n%s", diff)
			}
			for e := range covered {
				for i, k := range covered[e] {
					if k != 1 {
						t.Fatalf("expert %d row %d column %d covered %d times", e, i/tc.n, i%tc.n, k)
					}
				}
			}
			if got := len(items) / rowItemCount(counts, tc.step); got != tc.wantColBlocks {
				t.Errorf("%d column blocks per row item, want %d", got, tc.wantColBlocks)
			}
		})
	}
}

func rowItemCount(counts []int, step int) int {
	n := 0
	for _, c := range counts {
		n += (c + step - 1) / step
	}
	return n
}
