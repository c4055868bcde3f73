package proxy

// Benchmarks, not tests: they take tens of seconds and report latency figures. Run e.g.
//
//	go test -run '^$' -bench 'P99|Overhead|TokenCount' -benchtime 1x ./proxy/
//
// BenchmarkP99 replays one seeded open-loop trace (Poisson arrivals, heavy-tailed item lengths,
// ~70% offered load on 8 serial fake nodes) against two proxies, fixed+random and
// cost+least_loaded, and reports their p50/p99 side by side. BenchmarkOverhead compares
// Proxy.Score against zero-latency fake nodes with calling one node directly.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// heavyRequest builds a request of n items whose lengths follow a Pareto law (α = 1.2, from 40
// to 3000 tokens, about 4 bytes per token): most items short, a few very long.
func heavyRequest(r *rand.Rand, n int) *relevancev1.ScoreRequest {
	req := &relevancev1.ScoreRequest{Query: fmt.Sprintf("query %d", r.IntN(1e6))}
	for range n {
		toks := int(math.Min(3000, 40/math.Pow(1-r.Float64(), 1/1.2)))
		req.Items = append(req.Items, &relevancev1.Item{Text: strings.Repeat("abc ", toks)})
	}
	return req
}

// trueSeconds is what a fake node with coefficients c spends on req as one batch per item share:
// the items plus one prefix and overhead per node-sized share (a lower bound used to set the load).
func trueSeconds(c costmodel.Coeffs, req *relevancev1.ScoreRequest, batches int) float64 {
	prefix := 40 + fakenode.CountTokens(req.GetQuery()) + fakenode.CountTokens(prompt.DefaultInstruction)
	var s float64
	for _, it := range req.GetItems() {
		s += c.Seconds(costmodel.ItemFeatures(prefix, fakenode.CountTokens(it.GetText())+12))
	}
	return s + float64(batches)*(c.Seconds(costmodel.PrefixFeatures(prefix))+c.C)
}

func percentile(d []time.Duration, q float64) time.Duration {
	s := slices.Clone(d)
	slices.Sort(s)
	return s[min(len(s)-1, int(q*float64(len(s))))]
}

func BenchmarkP99(b *testing.B) {
	const (
		nodesN   = 8
		items    = 200
		requests = 600
		load     = 0.7
	)
	truth := costmodel.Coeffs{A: 4e-6, B: 2e-10, C: 5e-4}
	nodes, err := fakenode.StartCluster(nodesN, fakenode.Options{Coeffs: truth})
	if err != nil {
		b.Fatal(err)
	}
	defer nodes.Close()

	r := rand.New(rand.NewPCG(42, 42))
	trace := make([]*relevancev1.ScoreRequest, requests)
	var work float64
	for i := range trace {
		trace[i] = heavyRequest(r, items)
		work += trueSeconds(truth, trace[i], nodesN)
	}
	meanWork := work / requests
	rate := load * nodesN / meanWork // requests per second for 70% of the cluster's capacity
	gaps := make([]time.Duration, requests)
	for i := range gaps {
		gaps[i] = time.Duration(r.ExpFloat64() / rate * float64(time.Second))
	}
	b.Logf("trace: %d requests × %d items, mean work %.1fms, %.1f req/s on %d nodes (%.0f%% load)", requests, items, meanWork*1e3, rate, nodesN, load*100)

	// The first two are the comparison asked for; the others separate the effects of splitting
	// and routing, and the last starts from the default prior (about 5× off) and must learn.
	combos := [][3]string{
		{"fixed", "random", "truth"},
		{"cost", "least_loaded", "truth"},
		{"fixed", "least_loaded", "truth"},
		{"cost", "random", "truth"},
		{"cost", "least_loaded", "learned"},
	}
	proxies := make([]*Proxy, len(combos))
	for ci, combo := range combos {
		cfg := DefaultConfig()
		cfg.Nodes.Static = nodes.Addrs()
		cfg.Split.Strategy, cfg.Route.Strategy = combo[0], combo[1]
		cfg.Split.MaxBatchItems = 32
		cfg.SLO = 30 * time.Second
		cfg.Admission.Disabled = true
		if combo[2] == "truth" {
			cfg.Cost.Prior = truth
		}
		p, err := New(cfg, prometheus.NewRegistry(), nil)
		if err != nil {
			b.Fatal(err)
		}
		if err := p.Start(context.Background()); err != nil {
			b.Fatal(err)
		}
		defer p.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		if err := p.cluster.WaitFor(ctx, func() bool {
			for _, n := range p.Nodes() {
				if !n.Healthy {
					return false
				}
			}
			return true
		}); err != nil {
			b.Fatal(err)
		}
		cancel()
		proxies[ci] = p
	}

	// The configurations take turns on segments of the trace (the cluster drained in between),
	// so that bursts of load from other processes on this machine hit them alike.
	const segment = 50
	lat := make([][]time.Duration, len(combos))
	errs := make([]int, len(combos))
	var mu sync.Mutex
	for lo := 0; lo < requests; lo += segment {
		for ci, p := range proxies {
			var wg sync.WaitGroup
			next := time.Now()
			for i := lo; i < min(lo+segment, requests); i++ {
				next = next.Add(gaps[i])
				time.Sleep(time.Until(next))
				wg.Go(func() {
					start := time.Now()
					_, err := p.Score(context.Background(), trace[i])
					el := time.Since(start)
					mu.Lock()
					lat[ci] = append(lat[ci], el)
					if err != nil {
						errs[ci]++
					}
					mu.Unlock()
				})
			}
			wg.Wait()
		}
	}
	type result struct {
		name          string
		p50, p90, p99 time.Duration
		errs          int
	}
	var results []result
	for ci, combo := range combos {
		name := combo[0] + "+" + combo[1]
		if combo[2] == "learned" {
			name += " (default prior, learned)"
		}
		results = append(results, result{name, percentile(lat[ci], 0.5), percentile(lat[ci], 0.9), percentile(lat[ci], 0.99), errs[ci]})
	}
	b.ReportMetric(float64(results[0].p99.Microseconds())/1e3, "p99-ms-fixed+random")
	b.ReportMetric(float64(results[1].p99.Microseconds())/1e3, "p99-ms-cost+least_loaded")
	b.Logf("%-40s %10s %10s %10s %6s", "config", "p50", "p90", "p99", "errors")
	for _, r := range results {
		b.Logf("%-40s %10v %10v %10v %6d", r.name, r.p50.Round(100*time.Microsecond), r.p90.Round(100*time.Microsecond), r.p99.Round(100*time.Microsecond), r.errs)
	}
}

func BenchmarkOverhead(b *testing.B) {
	const calls = 2000
	nodes, err := fakenode.StartCluster(1, fakenode.Options{Parallel: true})
	if err != nil {
		b.Fatal(err)
	}
	defer nodes.Close()
	req := heavyRequest(rand.New(rand.NewPCG(1, 1)), 32)

	cc, err := grpc.NewClient(nodes[0].Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer cc.Close()
	direct := relevancev1.NewScorerClient(cc)
	breq := &relevancev1.ScoreBatchRequest{Query: req.GetQuery(), Items: req.GetItems()}

	cfg := DefaultConfig()
	cfg.Nodes.Static = nodes.Addrs()
	cfg.Split.MaxBatchItems = 64
	p, err := New(cfg, prometheus.NewRegistry(), nil)
	if err != nil {
		b.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		b.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		b.Fatal(err)
	}
	measure := func(f func() error) []time.Duration {
		out := make([]time.Duration, calls)
		for i := range out {
			start := time.Now()
			if err := f(); err != nil {
				b.Fatal(err)
			}
			out[i] = time.Since(start)
		}
		return out
	}
	viaDirect := func() error { _, err := direct.ScoreBatch(context.Background(), breq); return err }
	viaProxy := func() error { _, err := p.Score(context.Background(), req); return err }
	measure(viaDirect) // warm up connections and caches
	measure(viaProxy)
	d, q := measure(viaDirect), measure(viaProxy)
	b.Logf("32 items, zero-latency node, %d sequential calls each:", calls)
	b.Logf("  direct ScoreBatch: p50 %v p99 %v", percentile(d, 0.5), percentile(d, 0.99))
	b.Logf("  Proxy.Score:       p50 %v p99 %v", percentile(q, 0.5), percentile(q, 0.99))
	b.ReportMetric(float64(percentile(q, 0.5)-percentile(d, 0.5))/1e3, "overhead-p50-µs")
	b.ReportMetric(float64(percentile(q, 0.99)-percentile(d, 0.99))/1e3, "overhead-p99-µs")
}

// BenchmarkTokenCount is the planning cost of counting 1000 items' tokens (~250 words each),
// on product-like text with a repeating vocabulary (the exact tokenizer's word cache hits) and
// on random pseudo-words (it misses).
func BenchmarkTokenCount(b *testing.B) {
	r := rand.New(rand.NewPCG(3, 3))
	vocab := []string{"wireless", "headphones", "noise", "cancelling", "battery", "30h", "Bluetooth", "5.3", "over-ear", "black,", "foldable", "with", "case", "and", "USB-C", "charging"}
	pseudo := func() string {
		w := make([]byte, 2+r.IntN(9))
		for i := range w {
			w[i] = byte('a' + r.IntN(26))
		}
		return string(w)
	}
	for _, mix := range []string{"vocab", "pseudo"} {
		texts := make([]string, 1000)
		for i := range texts {
			var sb strings.Builder
			for range 250 {
				if mix == "vocab" {
					sb.WriteString(vocab[r.IntN(len(vocab))])
				} else {
					sb.WriteString(pseudo())
				}
				sb.WriteByte(' ')
			}
			texts[i] = sb.String()
		}
		for _, kind := range []string{TokensEstimate, TokensExact} {
			tc, err := prompt.NewCounter(kind)
			if err != nil {
				b.Fatal(err)
			}
			b.Run(mix+"/"+kind, func(b *testing.B) {
				for b.Loop() {
					for _, t := range texts {
						tc.Item(t)
					}
				}
			})
		}
	}
}
