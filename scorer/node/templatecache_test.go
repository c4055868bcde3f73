package node

import (
	"context"
	"encoding/json"
	"path/filepath"
	"testing"

	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/model"
)

// TestReplyCountsTemplateReuse: a node with the prefix cache scores a query it has not seen
// after another of the same instruction; the engine reuses the template's KV, and the reply's
// usage counts those tokens as reused, not computed; /v1/status reports the hit by level.
func TestReplyCountsTemplateReuse(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "tiny")
	if err := model.Generate(dir, model.GenSpec{Arch: "qwen3", Preset: "tiny", Seed: 1}); err != nil {
		t.Fatal(err)
	}
	cfg := testConfig()
	cfg.Model = dir
	cfg.PrefixCacheBytes = 64 << 20
	var eng *model.Engine
	h := start(t, cfg, func(ctx context.Context) (scorer.Engine, error) {
		e, err := model.Load(dir, model.Options{PrefixCacheBytes: cfg.PrefixCacheBytes})
		eng = e
		return e, err
	}, true)
	if _, err := h.client.ScoreBatch(ctxT(t), batch("espresso at home", "a short item")); err != nil {
		t.Fatal(err)
	}
	docs := []string{"a short item", "another item about coffee", "third"}
	resp, err := h.client.ScoreBatch(ctxT(t), batch("river city history", docs...))
	if err != nil {
		t.Fatal(err)
	}
	g, err := eng.Tokenize("", "river city history", docs, scorer.TokenizeOptions{})
	if err != nil {
		t.Fatal(err)
	}
	P, tmpl := uint64(len(g.Prefix)), uint64(g.TemplateLen)
	if u := resp.Usage; tmpl == 0 || u.PrefixTokens != P-tmpl || u.PrefixTokensReused != 2*P+tmpl {
		t.Errorf("usage prefix tokens %d, reused %d; want %d computed (a %d-token prefix less its %d-token template) and %d reused",
			u.PrefixTokens, u.PrefixTokensReused, P-tmpl, P, tmpl, 2*P+tmpl)
	}
	if resp.Stats.PrefixCached {
		t.Error("a template hit reported as a prefix-cache hit")
	}
	_, body := get(t, h, "/v1/status")
	var s Status
	if err := json.Unmarshal([]byte(body), &s); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	// (The node's start-up calibration passes add prefix misses of their own.)
	if c := s.PrefixCache; c == nil || c.TemplateHits != 1 || c.TemplateMisses != 1 {
		t.Errorf("status prefix cache %+v: want 1 template miss, then 1 hit", c)
	}
}
