package compare

import (
	"flag"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/workload"
	"github.com/relevance-scoring/relevance/proxy/front/serve"
	"github.com/relevance-scoring/relevance/proxy/split"
	"github.com/relevance-scoring/relevance/proxy/split/fixed"
)

func TestParseWhole(t *testing.T) {
	for _, name := range []string{"whole+round_robin", "whole+least_loaded+hedge"} {
		c, err := ParseConfig(name)
		if err != nil || c.Split != SplitWhole || c.Name() != name {
			t.Errorf("ParseConfig(%q) = %+v, %v", name, c, err)
		}
	}
	if c, _ := ParseConfig("whole+round_robin"); c != Whole {
		t.Errorf("whole+round_robin = %+v, want Whole", c)
	}
	for _, bad := range []string{"whole", "whole+next", "wholes+round_robin"} {
		if _, err := ParseConfig(bad); err == nil {
			t.Errorf("ParseConfig(%q): no error", bad)
		}
	}
	if slices.Contains(AllConfigs(), Whole) {
		t.Error("whole joined the default grid")
	}
}

// TestWholePlansOneBatchPerRequest: whole runs the proxy's fixed splitter with max_batch_items
// set (by the proxy's own flag) to the trace's largest request, so every request of the
// compare workload is planned as one batch; the other configurations keep the file's chunk size.
func TestWholePlansOneBatchPerRequest(t *testing.T) {
	spec, err := workload.Load("../../configs/workloads/compare.yaml")
	if err != nil {
		t.Fatal(err)
	}
	tr, err := workload.New(spec, spec.Seed)
	if err != nil {
		t.Fatal(err)
	}
	n := WholeBatchItems(tr)
	if n != 24 {
		t.Errorf("WholeBatchItems = %d, want 24 (the workload's items max)", n)
	}
	base := cluster.Proxy{HTTPAddr: "127.0.0.1:1", GRPCAddr: "127.0.0.1:2", Config: "p.yaml", Args: []string{"--log-level", "warn"}}
	p := proxyFor(base, Whole, n)
	if len(base.Args) != 2 {
		t.Fatalf("proxyFor changed the base's args: %v", base.Args)
	}
	args := cluster.ProxyArgs(p, []string{"127.0.0.1:3"})
	// The proxy reads them with its own flags.
	fs := flag.NewFlagSet("proxy serve", flag.ContinueOnError)
	fl := serve.RegisterFlags(fs)
	if err := fs.Parse(args[1:]); err != nil {
		t.Fatalf("proxy serve %v: %v", args, err)
	}
	cfg := serve.DefaultConfig()
	cfg.Proxy.Split.MaxBatchItems = 4 // what compare's proxy.yaml sets
	fl.Apply(&cfg)
	if cfg.Proxy.Split.Strategy != fixed.Type || cfg.Proxy.Split.MaxBatchItems != n || cfg.Proxy.Route.Strategy != "round_robin" {
		t.Fatalf("whole+round_robin gives the proxy split %q max_batch_items %d route %q; want fixed, %d, round_robin",
			cfg.Proxy.Split.Strategy, cfg.Proxy.Split.MaxBatchItems, cfg.Proxy.Route.Strategy, n)
	}
	sp := fixed.New()
	for i := range tr.Len() {
		r := tr.At(i)
		in := split.Input{PrefixTokens: 60, ItemTokens: r.ApproxTokens, Nodes: make([]split.Node, 8), MaxBatchItems: cfg.Proxy.Split.MaxBatchItems}
		if bs := sp.Split(in); len(bs) != 1 || len(bs[0].Items) != len(r.Items) {
			t.Fatalf("request %d (%d items): %d batches, want 1 of every item", i, len(r.Items), len(bs))
		}
	}
	for _, c := range []Config{{Split: "fixed", Route: "round_robin"}, Best} {
		q := proxyFor(base, c, n)
		if q.Split != c.Split || strings.Contains(strings.Join(q.Args, " "), "--max-batch-items") {
			t.Errorf("%s: split %q args %v: want the configuration as it is", c.Name(), q.Split, q.Args)
		}
	}
}

func TestHeadlineVsWhole(t *testing.T) {
	rows := []Row{
		{Config: Whole.Name(), Load: 0.7, P99ms: 800, P999ms: 900, GoodputRatio: 0.5},
		{Config: Best.Name(), Load: 0.7, P99ms: 200, P999ms: 300, GoodputRatio: 1},
	}
	if g := Headline(rows); len(g) != 0 {
		t.Errorf("Headline without fixed+random: %+v", g)
	}
	g := HeadlineVs(rows, Whole, Best)
	if len(g) != 1 || g[0].P99Ratio != 4 || g[0].GoodputPoints != 50 {
		t.Fatalf("HeadlineVs = %+v", g)
	}
	r := &Report{Emulated: true, Nodes: 8, NodeKind: "vllm", NodeConcurrency: 1, Baseline: Whole.Name(), Headline: g, SLOms: 500}
	if txt := r.HeadlineText(); !strings.Contains(txt, "cost+least_loaded vs whole+round_robin: p99 800.0 → 200.0 ms (4.00×)") {
		t.Errorf("headline text %q", txt)
	}
	if s := r.Summary(); !strings.Contains(s, "EMULATED comparison: 8 fake vllm nodes") || !strings.Contains(s, strconv.Itoa(1)+" call(s) at a time") {
		t.Errorf("summary %q", s)
	}
}
