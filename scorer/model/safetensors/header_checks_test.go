package safetensors

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestParseHeaderRefusesOverlappingOffsets: two tensors whose byte ranges overlap are a
// malformed file (the safetensors library refuses them too).
func TestParseHeaderRefusesOverlappingOffsets(t *testing.T) {
	tests := []struct{ name, header string }{
		{"overlap", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]}}`},
		{"alias", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]},"b":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := fileWith(tt.header, make([]byte, 12))
			if _, err := ParseHeader(b, int64(len(b))); err == nil {
				t.Fatalf("header with overlapping data_offsets accepted")
			}
		})
	}
}

// TestParseHeaderRefusesDuplicateNames: a JSON header that names one tensor twice is ambiguous;
// a map decode would keep the last silently.
func TestParseHeaderRefusesDuplicateNames(t *testing.T) {
	h := `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,4]},"a":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}}`
	b := fileWith(h, make([]byte, 8))
	if hd, err := ParseHeader(b, int64(len(b))); err == nil {
		t.Fatalf("duplicate tensor name accepted: %+v", hd.Tensors)
	}
}

// TestOpenDirRefusesTensorInTwoShards: a tensor held by two shards and absent from the index
// is refused: which copy is used would depend on the shards' sort order.
func TestOpenDirRefusesTensorInTwoShards(t *testing.T) {
	dir := t.TempDir()
	WriteFile(filepath.Join(dir, "s1.safetensors"), []WriteTensor{{Name: "x", DType: F32, Shape: []int{1}, F32: []float32{7}}, {Name: "z", DType: F32, Shape: []int{1}, F32: []float32{1}}}, nil)
	WriteFile(filepath.Join(dir, "s2.safetensors"), []WriteTensor{{Name: "y", DType: F32, Shape: []int{1}, F32: []float32{8}}, {Name: "z", DType: F32, Shape: []int{1}, F32: []float32{2}}}, nil)
	idx := `{"weight_map":{"x":"s1.safetensors","y":"s2.safetensors"}}`
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx), 0o644)
	c, err := OpenDir(dir)
	if err == nil {
		defer c.Close()
		z, _ := c.Tensor("z")
		t.Fatalf("tensor z in two shards accepted; got %v", z.F32)
	}
	if !strings.Contains(err.Error(), "z") {
		t.Fatalf("err = %v", err)
	}
}
