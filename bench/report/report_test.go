package report

import (
	"bytes"
	"encoding/json"
	"image/png"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/bench/load"
)

func TestWriteLoad(t *testing.T) {
	dir := t.TempDir()
	r := &load.Result{
		Mode: "open", Requests: 6, OK: 6, P50ms: 10, P99ms: 40, SLOms: 500, ErrorsBy: map[string]int64{},
		CDF:      []load.Quantile{{Q: 0, Ms: 5}, {Q: 0.5, Ms: 10}, {Q: 0.99, Ms: 40}, {Q: 0.999, Ms: 80}, {Q: 1, Ms: 90}},
		Timeline: []load.Window{{T: 0, OK: 3, P99ms: 20}, {T: 1, OK: 3, P99ms: 40}},
		Points:   []load.Point{{T: 0.1, Ms: 10}, {T: 1.2, Ms: 40}},
		Nodes:    []load.NodeSample{{T: 0.5, Node: "a", Load: 1}, {T: 1, Node: "a", Load: 2}, {T: 0.5, Node: "b", Load: 0}},
	}
	if err := WriteLoad(dir, "test", r); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"latency-cdf.png", "latency-time.png", "node-load.png"} {
		b, err := os.ReadFile(filepath.Join(dir, f))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := png.Decode(bytes.NewReader(b)); err != nil {
			t.Errorf("%s: not a PNG: %v", f, err)
		}
	}
	b, err := os.ReadFile(filepath.Join(dir, "result.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got load.Result
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if got.P99ms != 40 || len(got.CDF) != 5 {
		t.Errorf("round trip: p99 %v cdf %d", got.P99ms, len(got.CDF))
	}
}

func TestTable(t *testing.T) {
	got := Table([]string{"config", "p99"}, [][]string{{"cost", "12.5"}, {"fixed+random", "3"}}, true)
	want := "| config       |  p99 |\n| ------------ | ---: |\n| cost         | 12.5 |\n| fixed+random |    3 |\n"
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
}
