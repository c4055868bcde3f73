package workload

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestDistributionInFileReplacesTheDefaultWhole: a workload file is read over the built-in search
// workload, and a distribution it gives was merged field by field into the default one, whose
// min and max clamp every draw. `items: {kind: const, value: 10}` inherited items' min 20 and sent
// 20 items a request; `item_tokens: {kind: const, value: 3000}` inherited max 1500 and sent
// 1500-token items — silently, with the file saying otherwise. A distribution written in a file
// is that distribution; only the distributions it omits keep their defaults.
func TestDistributionInFileReplacesTheDefaultWhole(t *testing.T) {
	s, err := Parse([]byte("items: {kind: const, value: 10}\nitem_tokens: {kind: const, value: 3000}\ntrace_size: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	if want := (Dist{Kind: "const", Value: 10}); s.Items != want {
		t.Errorf("items = %+v, want %+v", s.Items, want)
	}
	if want := (Dist{Kind: "const", Value: 3000}); s.ItemTokens != want {
		t.Errorf("item_tokens = %+v, want %+v", s.ItemTokens, want)
	}
	if d := cmp.Diff(Default().QueryWords, s.QueryWords); d != "" {
		t.Errorf("query_words, not in the file, is not the default (-want +got):\n%s", d)
	}
	tr, err := New(s, s.Seed)
	if err != nil {
		t.Fatal(err)
	}
	if got := tr.MeanItems(); got != 10 {
		t.Errorf("mean items per request %v, want the file's 10", got)
	}
}

// TestWorkloadFileIsDecodedStrictly: workload files were the one YAML the binaries read without
// internal/yamlconf, so a fraction for a whole number was cut (popular_queries: 2.5 became 2,
// trace_size: 0.5 became 0, i.e. 512) and a second document after --- was never read, without a
// word, where every other config file refuses both.
func TestWorkloadFileIsDecodedStrictly(t *testing.T) {
	for _, body := range []string{
		"popular_queries: 2.5\n",
		"trace_size: 0.5\n",
		"name: a\n---\nitems: {kind: const, value: 10}\n",
	} {
		if s, err := Parse([]byte(body)); err == nil {
			t.Errorf("%q accepted: popular_queries %d, trace_size %d, items %+v", body, s.PopularQueries, s.TraceSize, s.Items)
		}
	}
}
