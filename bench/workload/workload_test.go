package workload

import (
	"math"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestTraceDeterministicBySeed(t *testing.T) {
	s := Default()
	s.TraceSize = 20
	a, err := New(s, 7)
	if err != nil {
		t.Fatal(err)
	}
	b, err := New(s, 7)
	if err != nil {
		t.Fatal(err)
	}
	c, err := New(s, 8)
	if err != nil {
		t.Fatal(err)
	}
	for i := range a.Len() {
		if diff := cmp.Diff(*a.At(i), *b.At(i)); diff != "" {
			t.Fatalf("request %d differs between two traces with the same seed (-a +b):\n%s", i, diff)
		}
	}
	if cmp.Equal(*a.At(0), *c.At(0)) {
		t.Fatal("different seeds gave the same first request")
	}
	// Request i depends only on (seed, i): a longer trace starts with the same requests.
	s.TraceSize = 40
	d, err := New(s, 7)
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(*a.At(5), *d.At(5)); diff != "" {
		t.Fatalf("request 5 depends on the trace size (-20 +40):\n%s", diff)
	}
	if got := a.At(20); got != a.At(0) {
		t.Fatal("At does not cycle over the trace")
	}
}

func TestTraceShape(t *testing.T) {
	s := Default()
	s.TraceSize = 80
	s.ChineseShare = 0.2
	s.RepeatQueryShare = 0.5
	tr, err := New(s, 1)
	if err != nil {
		t.Fatal(err)
	}
	var tokens []float64
	queries := map[string]int{}
	zh := 0
	for i := range tr.Len() {
		r := tr.At(i)
		if n := len(r.Items); n < 20 || n > 100 {
			t.Fatalf("request %d: %d items, want 20..100", i, n)
		}
		queries[r.Query]++
		for j, it := range r.Items {
			tokens = append(tokens, float64(r.ApproxTokens[j]))
			if strings.ContainsRune(it, '的') || strings.ContainsAny(it, "无防不人便超降智纯户") {
				zh++
			}
		}
	}
	repeated := 0
	for _, n := range queries {
		if n > 1 {
			repeated += n
		}
	}
	if repeated < tr.Len()/4 {
		t.Errorf("only %d of %d requests repeat a query, want about half", repeated, tr.Len())
	}
	share := float64(zh) / float64(len(tokens))
	if share < 0.1 || share > 0.3 {
		t.Errorf("Chinese share %.2f, want about 0.2", share)
	}
	var sum, max float64
	for _, x := range tokens {
		sum += x
		max = math.Max(max, x)
	}
	mean := sum / float64(len(tokens))
	if mean < 180 || mean > 330 {
		t.Errorf("mean item tokens %.0f, want about 250 (lognormal median 220, σ 0.5)", mean)
	}
	if max < 2*mean {
		t.Errorf("longest item %.0f tokens: no heavy tail over the mean %.0f", max, mean)
	}
}

func TestParseValidate(t *testing.T) {
	tests := []struct {
		name, yaml, wantErr string
	}{
		{name: "empty is default", yaml: ""},
		{name: "override", yaml: "name: x\nitems: {kind: const, value: 10}\n"},
		{name: "bad kind", yaml: "items: {kind: zipf}\n", wantErr: "workload.items.kind"},
		{name: "bad median", yaml: "item_tokens: {kind: lognormal, median: -1}\n", wantErr: "workload.item_tokens.median"},
		{name: "bad share", yaml: "repeat_query_share: 2\n", wantErr: "workload.repeat_query_share"},
		{name: "unknown field", yaml: "itemz: 3\n", wantErr: "itemz"},
		{name: "pareto", yaml: "item_tokens: {kind: pareto, scale: 100, alpha: 1.5, max: 2000}\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.yaml))
			switch {
			case tt.wantErr == "" && err != nil:
				t.Fatalf("unexpected error: %v", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Fatalf("error %v, want one naming %q", err, tt.wantErr)
			}
		})
	}
}

func TestEstimateTokens(t *testing.T) {
	tests := []struct {
		in   string
		want int
	}{
		{"", 0},
		{"wireless earbuds", 2}, {"noise-cancelling", 4},
		{"Price: $12", 5},
		{"无线蓝牙耳机", 5},
	}
	for _, tt := range tests {
		if got := EstimateTokens(tt.in); got != tt.want {
			t.Errorf("EstimateTokens(%q) = %d, want %d", tt.in, got, tt.want)
		}
	}
}

// BenchmarkGenerate is the cost of one search-like request (~60 items of ~250 tokens).
func BenchmarkGenerate(b *testing.B) {
	s := Default()
	b.ReportAllocs()
	i := uint64(0)
	for b.Loop() {
		generate(s, 1, i)
		i++
	}
}

// TestBuiltinsMatchConfigs: the built-in specs are the committed YAML files, so a bench run
// from outside the repository sends what one inside it does.
func TestBuiltinsMatchConfigs(t *testing.T) {
	for _, tt := range []struct {
		name string
		want Spec
		path string
	}{
		{"default", Default(), "../../configs/workloads/search.yaml"},
		{"small", Small(), "../../configs/workloads/small.yaml"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Load(tt.path)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("%s differs from the built-in (-want +got):\n%s", tt.path, diff)
			}
		})
	}
}

// TestRepeatedItemsOfPopularQueries: with repeat_items_share, a popular query's requests share
// items from its catalogue, so (query, item) pairs repeat across requests; without it they do not.
func TestRepeatedItemsOfPopularQueries(t *testing.T) {
	pairs := func(share float64) (repeats, total int) {
		s := Spec{Seed: 3, Items: Dist{Kind: "const", Value: 10}, QueryWords: Dist{Kind: "const", Value: 3},
			ItemTokens: Dist{Kind: "const", Value: 20}, RepeatQueryShare: 1, PopularQueries: 5,
			RepeatItemsShare: share, CatalogItems: 16, TraceSize: 200}
		tr, err := New(s, s.Seed)
		if err != nil {
			t.Fatal(err)
		}
		seen := map[string]bool{}
		for i := range 200 {
			r := tr.At(i)
			for _, it := range r.Items {
				k := r.Query + "\x00" + it
				if seen[k] {
					repeats++
				}
				seen[k] = true
				total++
			}
		}
		return repeats, total
	}
	if rep, total := pairs(0); rep > total/100 {
		t.Errorf("repeat_items_share 0: %d of %d pairs repeated", rep, total)
	}
	if rep, total := pairs(0.7); rep < total/2 {
		t.Errorf("repeat_items_share 0.7, catalogues of 16: only %d of %d pairs repeated", rep, total)
	}
}

func TestQueryPrefixLeavesTheTraceAlone(t *testing.T) {
	tr, err := New(Small(), 3)
	if err != nil {
		t.Fatal(err)
	}
	before := tr.At(0).Query
	p := tr.WithQueryPrefix("r07 ")
	if got := p.At(0).Query; got != "r07 "+before {
		t.Errorf("prefixed query %q, want %q", got, "r07 "+before)
	}
	if tr.At(0).Query != before || p.Len() != tr.Len() {
		t.Errorf("the original trace changed: %q (was %q), or lengths %d and %d", tr.At(0).Query, before, p.Len(), tr.Len())
	}
}

// TestChineseShareHoldsWithRepeatedItems: chinese_share is the share of items written in
// Chinese, whatever their origin. Items drawn from a popular query's catalogue
// (repeat_items_share) used to be English always, so configs/workloads/repetitive.yaml
// (chinese_share 0.1, 56 % of items from catalogues) sent 4.7 % Chinese items.
func TestChineseShareHoldsWithRepeatedItems(t *testing.T) {
	s := Spec{Seed: 3, Items: Dist{Kind: "const", Value: 20}, QueryWords: Dist{Kind: "const", Value: 3},
		ItemTokens: Dist{Kind: "const", Value: 40}, RepeatQueryShare: 1, PopularQueries: 10,
		RepeatItemsShare: 1, CatalogItems: 200, ChineseShare: 0.3, TraceSize: 400}
	tr, err := New(s, s.Seed)
	if err != nil {
		t.Fatal(err)
	}
	zh, total := 0, 0
	for i := range tr.Len() {
		for _, it := range tr.At(i).Items {
			total++
			if strings.ContainsAny(it, "无防不人便超降智纯户") {
				zh++
			}
		}
	}
	if share := float64(zh) / float64(total); share < 0.25 || share > 0.35 {
		t.Errorf("Chinese share %.3f of %d catalogue items, want about 0.3", share, total)
	}
}
