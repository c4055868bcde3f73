package proxy

import (
	"context"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// recordsAt is a slog.Handler that keeps the records of level and above, with their attributes.
type recordsAt struct {
	level slog.Level
	mu    sync.Mutex
	got   []map[string]slog.Value
	msgs  []string
}

func (h *recordsAt) Enabled(_ context.Context, l slog.Level) bool { return l >= h.level }

func (h *recordsAt) Handle(_ context.Context, r slog.Record) error {
	attrs := map[string]slog.Value{}
	r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value; return true })
	h.mu.Lock()
	defer h.mu.Unlock()
	h.got, h.msgs = append(h.got, attrs), append(h.msgs, r.Message)
	return nil
}

func (h *recordsAt) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *recordsAt) WithGroup(string) slog.Handler      { return h }

// with returns the attributes of every record with message msg.
func (h *recordsAt) with(msg string) []map[string]slog.Value {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]slog.Value
	for i, m := range h.msgs {
		if m == msg {
			out = append(out, h.got[i])
		}
	}
	return out
}

// TestDebugLogTracesEveryBatchCall: at debug level the proxy writes one record per batch call,
// naming the request, the batch, the node and the plan's projection beside what happened, so a
// late request can be explained after the fact; at info level it writes none.
func TestDebugLogTracesEveryBatchCall(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: costmodel.Coeffs{A: 1e-6, C: 1e-4}})
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			h := &recordsAt{level: level}
			cfg := testConfig(nodes.Addrs())
			cfg.Hedge.Enabled = false
			p, err := New(cfg, prometheus.NewRegistry(), slog.New(h))
			if err != nil {
				t.Fatal(err)
			}
			if err := p.Start(context.Background()); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = p.Close() })
			waitUntil(t, "nodes healthy", func() bool {
				return len(p.Nodes()) == 2 && p.Nodes()[0].Healthy && p.Nodes()[1].Healthy
			})
			req := makeRequest(20, 3)
			req.RequestId = "traced"
			score(t, p, req)

			got := h.with("batch call ended")
			if level > slog.LevelDebug {
				if len(got) != 0 {
					t.Fatalf("%d batch records at %v level, want none", len(got), level)
				}
				return
			}
			if len(got) < 2 {
				t.Fatalf("%d batch records for a request of 20 items in batches of at most 8, want one per batch", len(got))
			}
			items, seen := int64(0), map[int64]bool{}
			for _, r := range got {
				if r["request"].String() != "traced" || !slices.Contains(nodes.Addrs(), r["node"].String()) ||
					!(r["projected_s"].Float64() > 0) || !(r["elapsed_s"].Float64() > 0) || r["err"].Any() != nil {
					t.Errorf("record %v: want request \"traced\", one of the nodes %v, a projection, an elapsed time and no error", r, nodes.Addrs())
				}
				if b := r["batch"].Int64(); !seen[b] {
					items += r["items"].Int64()
					seen[b] = true
				}
			}
			if items != 20 {
				t.Errorf("the records' batches hold %d items, want the request's 20", items)
			}
		})
	}
}
