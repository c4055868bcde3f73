package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/kernels"
)

// moeLayer is the shape of one benchmarked MoE layer.
type moeLayer struct {
	Name                  string
	Experts, TopK         int
	Hidden, Inter         int
	quickHidden, quickInt int
}

var moeLayers = []moeLayer{
	{Name: "qwen3-30b-a3b", Experts: 128, TopK: 8, Hidden: 2048, Inter: 768, quickHidden: 256, quickInt: 96},
	{Name: "qwen1.5-moe", Experts: 60, TopK: 4, Hidden: 2048, Inter: 1408, quickHidden: 256, quickInt: 176},
}

// routingDist is one seeded routing distribution: tokens = sequences × 576.
type routingDist struct {
	Name  string
	Seqs  int
	ZipfS float64
}

var routingDists = []routingDist{
	{Name: "balanced-4x576", Seqs: 4},
	{Name: "zipf0.5-4x576", Seqs: 4, ZipfS: 0.5},
	{Name: "zipf1.0-4x576", Seqs: 4, ZipfS: 1.0},
	{Name: "balanced-1x576", Seqs: 1},
	{Name: "balanced-16x576", Seqs: 16},
}

type variantResult struct {
	Variant string  `json:"variant"`
	Seconds float64 `json:"seconds"`
	GFLOPS  float64 `json:"useful_gflops"`
	// CPUSeconds is the process CPU time of one run (all threads): on a shared machine it
	// leaves out the time the threads waited for a core.
	CPUSeconds float64 `json:"cpu_seconds"`
}

type distResult struct {
	Name            string             `json:"name"`
	Layer           string             `json:"layer"`
	Tokens          int                `json:"tokens"`
	Rows            int                `json:"rows"`
	PaddingRatio    map[string]float64 `json:"padding_ratio"`
	Variants        []variantResult    `json:"variants"`
	Best            string             `json:"best"`
	ThresholdChoice string             `json:"threshold_choice"`
	ThresholdRegret float64            `json:"threshold_regret"`
	AutoChoice      string             `json:"auto_choice"`
	AutoRegret      float64            `json:"auto_regret"`
	AutoPredicted   map[string]float64 `json:"auto_predicted_seconds"`
	// Best, ThresholdRegret and AutoRegret use the clock the report names (regret_clock); these
	// give both clocks.
	BestWall            string  `json:"best_wall"`
	BestCPU             string  `json:"best_cpu"`
	ThresholdRegretWall float64 `json:"threshold_regret_wall"`
	ThresholdRegretCPU  float64 `json:"threshold_regret_cpu"`
	AutoRegretWall      float64 `json:"auto_regret_wall"`
	AutoRegretCPU       float64 `json:"auto_regret_cpu"`
}

type kernelsReport struct {
	PeakF32GFLOPS   float64                         `json:"peak_f32_gflops"`
	GemmF32GFLOPS   float64                         `json:"gemm_f32_gflops"`
	GemmBF16GFLOPS  float64                         `json:"gemm_bf16_gflops"`
	GemmF32GFLOPS2T float64                         `json:"gemm_f32_gflops_2t"`
	GemmShape       string                          `json:"gemm_shape"`
	Implementation  string                          `json:"implementation"`
	Threads         int                             `json:"threads"`
	DType           string                          `json:"dtype"`
	Quick           bool                            `json:"quick"`
	Reps            int                             `json:"reps"`
	RegretClock     string                          `json:"regret_clock"`
	LoadAvg         string                          `json:"load_avg"`
	WeightSets      int                             `json:"weight_sets"`
	CostTables      map[string]kernels.MoECostTable `json:"cost_tables"`
	Distributions   []distResult                    `json:"distributions"`

	// GemmF32Efficiency is the one-thread f32 GEMM rate over the one-core peak, the median of
	// interleaved pairs (kernels.GemmEfficiency); GemmF32Speedup2T is the two-thread speed-up
	// over one thread, the median of interleaved pairs on wall time (kernels.GemmSpeedup).
	GemmF32Efficiency float64 `json:"gemm_f32_efficiency"`
	GemmF32Speedup2T  float64 `json:"gemm_f32_2t_speedup"`

	// gemm_bf16_gflops is the BF16 figure: bf16 weights with bf16 dot products where
	// the CPU has them (kernels.BF16MatmulBF16; GemmBF16Impl names the path: "amx-bf16" with
	// AMX, "avx512-bf16dot" with AVX512_BF16 only). The scorer's default for bf16 checkpoints is
	// the f32-accuracy mode (auto: AMX with three bf16 terms per activation), reported beside it,
	// as is the widening AVX-512 path; gemm_bf16_over_f32 is gemm_bf16_gflops / gemm_f32_gflops.
	GemmBF16Impl         string  `json:"gemm_bf16_impl"`
	GemmBF16AutoGFLOPS   float64 `json:"gemm_bf16_auto_gflops"`
	GemmBF16AutoImpl     string  `json:"gemm_bf16_auto_impl"`
	GemmBF16WidenGFLOPS  float64 `json:"gemm_bf16_widen_gflops"`
	GemmBF16OverF32Ratio float64 `json:"gemm_bf16_over_f32"`
}

func runKernels(args []string) error { return kernelsMain(args, os.Stdout, os.Stderr) }

// kernelsMain is runKernels with its output streams given (tests read the JSON).
func kernelsMain(args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("bench", "kernels", "[--json] [--quick] [--layers a,b]")
	asJSON := fs.Bool("json", false, "print one JSON object instead of tables")
	quick := fs.Bool("quick", false, "shrink the layers (hidden 256, widths /8) and repetitions for CI")
	layers := fs.String("layers", "qwen3-30b-a3b,qwen1.5-moe", "comma-separated MoE layer shapes: qwen3-30b-a3b, qwen1.5-moe")
	dists := fs.String("dists", "", "comma-separated distribution names to run (empty: all)")
	dtype := fs.String("dtype", "bf16", "expert weight type: f32 or bf16")
	threads := fs.Int("threads", 2, "kernel threads for the MoE runs (≥ 1)")
	reps := fs.Int("reps", 3, "timed repetitions per variant (median reported); 0: 3, or 1 with --quick")
	calib := fs.Duration("calibrate", time.Second, "auto policy's cost-table measurement budget per layer")
	weightSets := fs.Int("weight-sets", 8, "distinct expert weight sets, shared round-robin by the experts (bounds memory; ≥ 1)")
	gemmTime := fs.Duration("gemm-time", 300*time.Millisecond, "measuring time of each GEMM figure")
	seed := fs.Uint64("seed", 1, "routing and weight seed")
	clock := fs.String("clock", "cpu", "time that scores the variants and regrets: cpu (process CPU time, robust on a shared machine) or wall")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *threads < 1 {
		return fmt.Errorf("--threads: must be ≥ 1, got %d", *threads)
	}
	if *weightSets < 1 {
		return fmt.Errorf("--weight-sets: must be ≥ 1, got %d", *weightSets)
	}
	if *reps < 0 {
		return fmt.Errorf("--reps: must be ≥ 0, got %d", *reps)
	}
	if *reps == 0 {
		*reps = 3
		if *quick {
			*reps = 1
		}
	}
	if *clock != "cpu" && *clock != "wall" {
		return fmt.Errorf("--clock: want cpu or wall, got %q", *clock)
	}
	if *clock == "cpu" && kernels.ProcessCPUTime() == 0 {
		*clock = "wall" // no CPU clock on this system
	}
	var dt kernels.DType
	switch *dtype {
	case "f32":
		dt = kernels.F32
	case "bf16":
		dt = kernels.BF16
	default:
		return fmt.Errorf("--dtype: want f32 or bf16, got %q", *dtype)
	}
	var sel []moeLayer
	for _, name := range strings.Split(*layers, ",") {
		i := slices.IndexFunc(moeLayers, func(l moeLayer) bool { return l.Name == strings.TrimSpace(name) })
		if i < 0 {
			return fmt.Errorf("--layers: unknown layer %q (want qwen3-30b-a3b or qwen1.5-moe)", name)
		}
		sel = append(sel, moeLayers[i])
	}
	var selDists []routingDist
	for _, d := range routingDists {
		if *dists == "" || slices.Contains(strings.Split(*dists, ","), d.Name) {
			selDists = append(selDists, d)
		}
	}
	if len(selDists) == 0 {
		return fmt.Errorf("--dists: no distribution matches %q", *dists)
	}

	prevThreads := kernels.Threads()
	defer kernels.SetThreads(prevThreads)
	out := stdout
	text := stderr // progress and tables; stdout only holds the JSON with --json
	if !*asJSON {
		text = out
	}

	rep := kernelsReport{Threads: *threads, DType: dt.String(), Quick: *quick, Reps: *reps, RegretClock: *clock,
		WeightSets: *weightSets, Implementation: kernels.Implementation(), LoadAvg: loadAvg(),
		CostTables: map[string]kernels.MoECostTable{}}
	gm, gn, gk := 144, 1536, 2048
	rep.GemmShape = fmt.Sprintf("%d×%d×%d", gm, gn, gk)
	// Peak and one-thread f32 rate come from the same interleaved pairs as their ratio.
	rep.GemmF32Efficiency, rep.PeakF32GFLOPS, rep.GemmF32GFLOPS = kernels.GemmEfficiency(gm, gn, gk, *gemmTime)
	// bf16 weights in each mode (kernels.SetBF16Matmul).
	prevMode := kernels.BF16MatmulMode()
	bf16Mode := func(mode string) (float64, string) {
		if err := kernels.SetBF16Matmul(mode); err != nil {
			panic(err) // the names are the package's own constants
		}
		return kernels.GemmGFLOPS(gm, gn, gk, kernels.BF16, 1, *gemmTime), kernels.Implementation()
	}
	rep.GemmBF16GFLOPS, rep.GemmBF16Impl = bf16Mode(kernels.BF16MatmulBF16)
	rep.GemmBF16AutoGFLOPS, rep.GemmBF16AutoImpl = bf16Mode(kernels.BF16MatmulAuto)
	rep.GemmBF16WidenGFLOPS, _ = bf16Mode(kernels.BF16MatmulWiden)
	if err := kernels.SetBF16Matmul(prevMode); err != nil {
		return err
	}
	if rep.GemmF32GFLOPS > 0 {
		rep.GemmBF16OverF32Ratio = rep.GemmBF16GFLOPS / rep.GemmF32GFLOPS
	}
	rep.GemmF32Speedup2T, _, rep.GemmF32GFLOPS2T = kernels.GemmSpeedup(gm, gn, gk, 2, *gemmTime)
	fmt.Fprintf(text, "kernels: %s; load average %s\n", rep.Implementation, rep.LoadAvg)
	fmt.Fprintf(text, "peak f32 one core %.1f GFLOP/s; GEMM %s: f32 1t %.1f (%.1f %% of peak), bf16 1t %.1f (%s, %.2f× f32), f32 2t %.1f GFLOP/s (%.2f× 1t)\n",
		rep.PeakF32GFLOPS, rep.GemmShape, rep.GemmF32GFLOPS, 100*rep.GemmF32Efficiency, rep.GemmBF16GFLOPS, rep.GemmBF16Impl,
		rep.GemmBF16OverF32Ratio, rep.GemmF32GFLOPS2T, rep.GemmF32Speedup2T)
	fmt.Fprintf(text, "bf16 weights at f32 accuracy: %s %.1f GFLOP/s (the scorer's default), widen %.1f GFLOP/s\n\n",
		rep.GemmBF16AutoImpl, rep.GemmBF16AutoGFLOPS, rep.GemmBF16WidenGFLOPS)

	kernels.SetThreads(*threads)
	for _, l := range sel {
		h, in := l.Hidden, l.Inter
		if *quick {
			h, in = l.quickHidden, l.quickInt
		}
		experts := benchExperts(l.Experts, h, in, dt, *weightSets, *seed)
		auto := kernels.NewMoERunner(kernels.MoEPolicy{Kind: kernels.PolicyAuto})
		threshold := kernels.NewMoERunner(kernels.MoEPolicy{Kind: kernels.PolicyThreshold})
		t0 := time.Now()
		table, err := auto.Calibrate(experts, *calib)
		if err != nil {
			return fmt.Errorf("layer %s: %w", l.Name, err)
		}
		rep.CostTables[l.Name] = table
		fmt.Fprintf(text, "== %s: %d experts, top-%d, hidden %d, width %d, %s weights (%d distinct sets), %d threads\n",
			l.Name, l.Experts, l.TopK, h, in, dt, *weightSets, *threads)
		fmt.Fprintf(text, "   auto cost table (%v): tile µs 128:%.0f 64:%.0f 32:%.0f 16:%.0f; exact %d-row items: %.0f µs + %.2f µs/row\n",
			time.Since(t0).Round(time.Millisecond), table.TileSeconds[0]*1e6, table.TileSeconds[1]*1e6,
			table.TileSeconds[2]*1e6, table.TileSeconds[3]*1e6, table.ItemRows, table.ItemSeconds*1e6, table.RowSeconds*1e6)
		for _, d := range selDists {
			r, err := benchDist(l, d, h, in, experts, auto, threshold, *reps, *seed, *clock == "cpu")
			if err != nil {
				return fmt.Errorf("layer %s, %s: %w", l.Name, d.Name, err)
			}
			printDist(text, r)
			rep.Distributions = append(rep.Distributions, r)
		}
	}
	rep.LoadAvg = rep.LoadAvg + " → " + loadAvg()
	if *asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return nil
}

// benchDist times every variant on one routing (interleaved repetitions, medians) and scores the
// policies' choices against the fastest.
func benchDist(l moeLayer, d routingDist, h, in int, experts []kernels.Expert, auto, threshold *kernels.MoERunner, reps int, seed uint64, byCPU bool) (distResult, error) {
	nTok := d.Seqs * 576
	rt, err := kernels.SyntheticRouting(nTok, l.Experts, l.TopK, d.ZipfS, seed+uint64(d.Seqs)*31+uint64(d.ZipfS*100))
	if err != nil {
		return distResult{}, err
	}
	counts := kernels.RoutingCounts(rt)
	res := distResult{Name: l.Name + "/" + d.Name, Layer: l.Name, Tokens: nTok,
		PaddingRatio: map[string]float64{}, AutoPredicted: map[string]float64{}}
	for _, c := range counts {
		res.Rows += c
	}
	for _, b := range []int{128, 64, 32, 16} {
		res.PaddingRatio[fmt.Sprint(b)] = kernels.PaddingRatio(counts, b)
	}
	rng := rand.New(rand.NewPCG(seed, 7))
	x := make([]float32, nTok*h)
	for i := range x {
		x[i] = float32(rng.NormFloat64())
	}
	outBuf := make([]float32, len(x))
	variants := kernels.MoEVariants()
	times := make([][]float64, len(variants))
	cpu := make([][]float64, len(variants))
	// One untimed pass of the most padded variant first: it grows the runner's scratch to the
	// largest size any variant needs here, so no timed run allocates.
	if _, err := auto.RunVariant(kernels.VariantBlock128, outBuf, x, h, experts, rt); err != nil {
		return distResult{}, err
	}
	for range reps {
		for i, v := range variants {
			clear(outBuf)
			c0, t0 := kernels.ProcessCPUTime(), time.Now()
			if _, err := auto.RunVariant(v, outBuf, x, h, experts, rt); err != nil {
				return distResult{}, err
			}
			times[i] = append(times[i], time.Since(t0).Seconds())
			cpu[i] = append(cpu[i], (kernels.ProcessCPUTime() - c0).Seconds())
		}
	}
	flops := 6 * float64(res.Rows) * float64(h) * float64(in) // gate, up, down: 2·H·I each
	best, bestCPU := 0, 0
	med := make([]float64, len(variants))
	medCPU := make([]float64, len(variants))
	for i, v := range variants {
		med[i], medCPU[i] = median(times[i]), median(cpu[i])
		res.Variants = append(res.Variants, variantResult{Variant: v.String(), Seconds: med[i],
			GFLOPS: flops / med[i] / 1e9, CPUSeconds: medCPU[i]})
		if med[i] < med[best] {
			best = i
		}
		if medCPU[i] < medCPU[bestCPU] {
			bestCPU = i
		}
	}
	res.BestWall, res.BestCPU = variants[best].String(), variants[bestCPU].String()
	regret := func(v kernels.MoEVariant) float64 {
		return med[slices.Index(variants, v)]/med[best] - 1
	}
	regretCPU := func(v kernels.MoEVariant) float64 {
		return medCPU[slices.Index(variants, v)]/medCPU[bestCPU] - 1
	}
	tv, err := threshold.Choose(experts, counts)
	if err != nil {
		return distResult{}, err
	}
	av, err := auto.Choose(experts, counts)
	if err != nil {
		return distResult{}, err
	}
	res.ThresholdChoice, res.AutoChoice = tv.String(), av.String()
	res.ThresholdRegretWall, res.AutoRegretWall = regret(tv), regret(av)
	res.ThresholdRegretCPU, res.AutoRegretCPU = regretCPU(tv), regretCPU(av)
	res.Best, res.ThresholdRegret, res.AutoRegret = res.BestWall, res.ThresholdRegretWall, res.AutoRegretWall
	if byCPU {
		res.Best, res.ThresholdRegret, res.AutoRegret = res.BestCPU, res.ThresholdRegretCPU, res.AutoRegretCPU
	}
	if table, ok := auto.CostTable(h, in, experts[0].Gate.DType); ok {
		for _, v := range variants {
			res.AutoPredicted[v.String()] = table.Predict(v, counts)
		}
	}
	return res, nil
}

func printDist(w io.Writer, r distResult) {
	fmt.Fprintf(w, "-- %s: %d tokens, %d rows; padded/actual 128:%.2f 64:%.2f 32:%.2f 16:%.2f\n",
		r.Name, r.Tokens, r.Rows, r.PaddingRatio["128"], r.PaddingRatio["64"], r.PaddingRatio["32"], r.PaddingRatio["16"])
	fmt.Fprintf(w, "   %-9s %10s %14s %11s %12s\n", "variant", "time ms", "useful GFLOP/s", "cpu ms", "auto pred ms")
	for _, v := range r.Variants {
		mark := ""
		if v.Variant == r.BestWall {
			mark += "  ← best wall"
		}
		if v.Variant == r.BestCPU {
			mark += "  ← best cpu"
		}
		fmt.Fprintf(w, "   %-9s %10.2f %14.1f %11.2f %12.2f%s\n", v.Variant, v.Seconds*1e3, v.GFLOPS, v.CPUSeconds*1e3,
			r.AutoPredicted[v.Variant]*1e3, mark)
	}
	fmt.Fprintf(w, "   threshold → %s (regret cpu %.1f%%, wall %.1f%%); auto → %s (regret cpu %.1f%%, wall %.1f%%)\n\n",
		r.ThresholdChoice, 100*r.ThresholdRegretCPU, 100*r.ThresholdRegretWall, r.AutoChoice, 100*r.AutoRegretCPU, 100*r.AutoRegretWall)
}

// benchExperts builds nE experts that share sets distinct weight sets round-robin: the weights
// of a full layer (2.4 GB in f32 for 128 experts) would not fit beside six other agents, and
// eight sets already exceed the caches, so every expert's weights still come from memory.
func benchExperts(nE, h, in int, dt kernels.DType, sets int, seed uint64) []kernels.Expert {
	rng := rand.New(rand.NewPCG(seed, 11))
	mk := func(n, k int) *kernels.Weight {
		w := make([]float32, n*k)
		s := 1 / math.Sqrt(float64(k))
		for i := range w {
			w[i] = float32(rng.NormFloat64() * s)
		}
		if dt == kernels.BF16 {
			b := make([]uint16, len(w))
			kernels.F32ToBF16(b, w)
			return kernels.NewWeightBF16(b, n, k)
		}
		return kernels.NewWeightF32(w, n, k)
	}
	base := make([]kernels.Expert, min(sets, nE))
	for i := range base {
		base[i] = kernels.Expert{Gate: mk(in, h), Up: mk(in, h), Down: mk(h, in)}
	}
	ex := make([]kernels.Expert, nE)
	for e := range ex {
		ex[e] = base[e%len(base)]
	}
	return ex
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	if len(s) == 0 {
		return math.NaN()
	}
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

func loadAvg() string {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return "unknown"
	}
	f := strings.Fields(string(b))
	if len(f) < 3 {
		return "unknown"
	}
	return strings.Join(f[:3], " ")
}
