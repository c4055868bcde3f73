package proxy

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"slices"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// syncBuffer is a bytes.Buffer safe for the proxy's concurrent log writes.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestDebugLogTracesEveryBatchCall: at debug level the proxy writes one record per batch call,
// naming the request, the batch, the node and the plan's projection beside what happened, so a
// late request can be explained after the fact; at info level it writes none.
func TestDebugLogTracesEveryBatchCall(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: costmodel.Coeffs{A: 1e-6, C: 1e-4}})
	for _, level := range []slog.Level{slog.LevelDebug, slog.LevelInfo} {
		t.Run(level.String(), func(t *testing.T) {
			var buf syncBuffer
			cfg := testConfig(nodes.Addrs())
			cfg.Hedge.Enabled = false
			p, err := New(cfg, prometheus.NewRegistry(), slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: level})))
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

			type record struct {
				Msg           string
				Request, Node string
				Batch, Items  int
				Projected     float64 `json:"projected_s"`
				Elapsed       float64 `json:"elapsed_s"`
				Err           any
			}
			var got []record
			for line := range bytes.Lines([]byte(buf.String())) {
				var r record
				if err := json.Unmarshal(line, &r); err != nil {
					t.Fatalf("log line %q: %v", line, err)
				}
				if r.Msg == "batch call ended" {
					got = append(got, r)
				}
			}
			if level > slog.LevelDebug {
				if len(got) != 0 {
					t.Fatalf("%d batch records at %v level, want none", len(got), level)
				}
				return
			}
			if len(got) < 2 {
				t.Fatalf("%d batch records for a request of 20 items in batches of at most 8, want one per batch", len(got))
			}
			items, seen := 0, map[int]bool{}
			for _, r := range got {
				if r.Request != "traced" || !slices.Contains(nodes.Addrs(), r.Node) || !(r.Projected > 0) || !(r.Elapsed > 0) || r.Err != nil {
					t.Errorf("record %+v: want request \"traced\", one of the nodes %v, a projection, an elapsed time and no error", r, nodes.Addrs())
				}
				if !seen[r.Batch] {
					items += r.Items
				}
				seen[r.Batch] = true
			}
			if items != 20 {
				t.Errorf("the records' batches hold %d items, want the request's 20", items)
			}
		})
	}
}
