package realtest

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/relevance-scoring/relevance/prompt"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model"
	"github.com/relevance-scoring/relevance/scorer/node"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func startNode(t *testing.T, dir, id string) (*node.Node, *model.Engine) {
	t.Helper()
	eng, err := model.Load(dir, model.Options{Threads: 1})
	if err != nil {
		t.Fatal(err)
	}
	cfg := node.Default()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.NodeID, cfg.Model = "127.0.0.1:0", "127.0.0.1:0", id, dir
	cfg.DrainTimeout = 5 * time.Second
	n, err := node.New(cfg, func(context.Context) (scorer.Engine, error) { return eng, nil },
		node.Options{Registry: prometheus.NewRegistry(), Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_ = n.Shutdown(ctx)
		_ = eng.Close()
	})
	<-n.Loaded()
	if err := n.LoadErr(); err != nil {
		t.Fatal(err)
	}
	return n, eng
}

// TestRealNodes splits one request across two real scorer nodes and checks that every score is
// the one a single engine gives the whole request (prefix reuse is exact), that the reply is in
// input order, and that the proxy's exact token counts are the nodes' own.
func TestRealNodes(t *testing.T) {
	if testing.Short() {
		t.Skip("loads a model")
	}
	dir := t.TempDir()
	if err := model.Generate(dir, model.GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	n1, ref := startNode(t, dir, "n1")
	n2, _ := startNode(t, dir, "n2")

	cfg := proxy.DefaultConfig()
	cfg.Nodes.Static = []string{n1.GRPCAddr(), n2.GRPCAddr()}
	cfg.SLO = 60 * time.Second
	cfg.Split.MaxBatchItems = 4
	cfg.Cost.TokenCounter = proxy.TokensExact
	p, err := proxy.New(cfg, prometheus.NewRegistry(), nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Start(context.Background()); err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := p.WaitReady(ctx); err != nil {
		t.Fatal(err)
	}
	for healthy := 0; healthy < 2; {
		healthy = 0
		for _, s := range p.Nodes() {
			if s.Healthy {
				healthy++
			}
		}
		if ctx.Err() != nil {
			t.Fatal("nodes never both healthy")
		}
		time.Sleep(5 * time.Millisecond) // health arrives asynchronously; bounded by ctx
	}

	query := "how do I make a cheap espresso at home?"
	docs := []string{
		"A moka pot makes strong coffee on a stove for a few dollars.",
		"The 2018 World Cup final was played in Moscow.",
		"Espresso needs about nine bars of pressure; cheap machines use steam instead.",
		"北京是中华人民共和国的首都。",
		"Buy a hand grinder and an AeroPress for an espresso-like shot.",
		"Photosynthesis converts light into chemical energy.",
		"Cold brew steeps grounds in cold water for twelve hours.",
		"Milk frothers heat and aerate milk for lattes.",
		"Café cubano is sweetened espresso from Cuba.",
		"<|im_end|> special-looking text stays plain text",
	}
	req := &relevancev1.ScoreRequest{Query: query, TopN: 3}
	for i, d := range docs {
		req.Items = append(req.Items, &relevancev1.Item{Id: fmt.Sprint("d", i), Text: d})
	}
	resp, err := p.Score(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	want, _, err := ref.Score(ctx, "", query, docs, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tc, err := prompt.NewCounter(prompt.CountExact)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range resp.GetScores() {
		if s.GetIndex() != uint32(i) || s.GetId() != fmt.Sprint("d", i) {
			t.Errorf("scores[%d]: index %d id %q", i, s.GetIndex(), s.GetId())
		}
		if math.Abs(float64(s.GetScore())-want[i]) > 1e-4 {
			t.Errorf("scores[%d] = %v through the proxy, %v from one engine", i, s.GetScore(), want[i])
		}
		if got := tc.Item(docs[i]); uint32(got) != s.GetTokens() {
			t.Errorf("item %d: proxy counts %d tokens, the node %d", i, got, s.GetTokens())
		}
	}
	if len(resp.GetRanking()) != 3 {
		t.Errorf("ranking %v, want top 3", resp.GetRanking())
	}
	var batches int64
	for _, s := range p.Nodes() {
		batches += s.Batches
		if s.Samples == 0 {
			t.Errorf("node %s: no cost sample learned from its replies", s.Addr)
		}
	}
	if batches < 2 {
		t.Errorf("%d batches: the request was not split across nodes", batches)
	}
	// The proxy's prefix count matches the node's (usage: prefix tokens per batch).
	if u := resp.GetUsage(); u.GetPrefixTokens() != uint64(batches)*uint64(tc.Prefix("", query)) && u.GetPrefixTokensReused() == 0 {
		t.Errorf("usage %v: prefix tokens want %d per batch × %d", u, tc.Prefix("", query), batches)
	}
}
