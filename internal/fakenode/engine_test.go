package fakenode

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/node"
)

// startRealNode runs the real scorer/node server over a scripted engine.
func startRealNode(t *testing.T, e *ScriptedEngine) *node.Node {
	t.Helper()
	cfg := node.Default()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.Engine, cfg.Model = "127.0.0.1:0", "127.0.0.1:0", node.EngineReal, "fakenode"
	n, err := node.New(cfg, func(context.Context) (scorer.Engine, error) { return e, nil },
		node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = n.Shutdown(context.Background()) })
	<-n.Loaded()
	return n
}

// TestScriptedEngineUnderRealNode: the real node serves the scripted engine's times and
// scores. Scores go through the node's float32 logit → sigmoid, so they match Score to about
// 1e-6, not bit for bit (see the package doc's note on what the switch to the real node needs).
func TestScriptedEngineUnderRealNode(t *testing.T) {
	e := NewScriptedEngine(Options{Latency: func(Batch) time.Duration { return 20 * time.Millisecond }, Coeffs: costmodel.Coeffs{C: 0.02}})
	n := startRealNode(t, e)
	cc := dial(t, &Node{addr: n.GRPCAddr()})
	c := relevancev1.NewScorerClient(cc)
	var texts []string
	for i := range 200 {
		texts = append(texts, fmt.Sprintf("item text %d", i))
	}
	start := time.Now()
	resp, err := c.ScoreBatch(context.Background(), batch(texts...))
	if err != nil {
		t.Fatal(err)
	}
	if el := time.Since(start); el < 20*time.Millisecond {
		t.Errorf("pass took %v, want ≥ the scripted 20ms", el)
	}
	exact := 0
	for i, s := range resp.GetScores() {
		want := Score("q", texts[i])
		if d := float64(s.GetScore() - want); d > 1e-6 || d < -1e-6 {
			t.Errorf("item %d: score %v, want %v", i, s.GetScore(), want)
		}
		if s.GetScore() == want {
			exact++
		}
	}
	t.Logf("%d of %d scores bit-exact after the node's logit → sigmoid", exact, len(texts))
}
