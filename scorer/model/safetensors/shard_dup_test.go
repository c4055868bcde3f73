package safetensors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestShardedRefusesATensorInTwoShards: a tensor held by two shards of an indexed checkpoint is
// ambiguous. OpenDir read the copy the index names, transformers 4 loads every shard in turn and
// keeps the last copy, and the fingerprint (the shards' bytes and the shard list) does not see
// which copy the index names: repointing the index changed the weights, and so the scores, under
// an unchanged fingerprint. Refuse it, naming the tensor and both shards.
func TestShardedRefusesATensorInTwoShards(t *testing.T) {
	dir := t.TempDir()
	a, b := "model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"
	for i, name := range []string{a, b} {
		ts := []WriteTensor{
			{Name: "norm", DType: F32, Shape: []int{1}, F32: []float32{float32(i + 1)}},
			{Name: []string{"x", "y"}[i], DType: F32, Shape: []int{1}, F32: []float32{0}},
		}
		if err := WriteFile(filepath.Join(dir, name), ts, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, at := range []string{a, b} {
		idx := `{"weight_map":{"x":"` + a + `","y":"` + b + `","norm":"` + at + `"}}`
		if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx), 0o644); err != nil {
			t.Fatal(err)
		}
		c, err := OpenDir(dir)
		if err == nil {
			n, _ := c.Tensor("norm")
			v := n.F32[0] // a view of the mapping: read it before Close
			c.Close()
			t.Fatalf("index naming %s: opened, norm = %v; want an error naming the tensor in both shards", at, v)
		}
		if !strings.Contains(err.Error(), "norm") || !strings.Contains(err.Error(), a) || !strings.Contains(err.Error(), b) {
			t.Fatalf("err = %v, want it to name norm, %s and %s", err, a, b)
		}
	}
}
