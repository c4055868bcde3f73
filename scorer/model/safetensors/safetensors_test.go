package safetensors

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func fileWith(header string, data []byte) []byte {
	var b bytes.Buffer
	var n [8]byte
	binary.LittleEndian.PutUint64(n[:], uint64(len(header)))
	b.Write(n[:])
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func TestParseHeaderErrors(t *testing.T) {
	tests := []struct {
		name, header string
		data         int
		want         string
	}{
		{"not json", `{"a":`, 0, "not a JSON object"},
		{"bad dtype", `{"a":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}}`, 8, `unsupported dtype "I64"`},
		{"offsets count", `{"a":{"dtype":"F32","shape":[1],"data_offsets":[0]}}`, 4, "data_offsets must have 2"},
		{"past end", `{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, 4, "outside the data section"},
		{"size mismatch", `{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}`, 8, "want 12"},
		{"negative dim", `{"a":{"dtype":"F32","shape":[-1],"data_offsets":[0,0]}}`, 0, "bad dimension"},
		{"huge shape", `{"a":{"dtype":"F32","shape":[2147483647,2147483647,2147483647],"data_offsets":[0,0]}}`, 0, "too large"},
		{"reversed", `{"a":{"dtype":"F32","shape":[0],"data_offsets":[4,0]}}`, 4, "outside"},
		{"bad metadata", `{"__metadata__":{"a":1}}`, 0, "__metadata__"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			b := fileWith(tt.header, make([]byte, tt.data))
			_, err := ParseHeader(b, int64(len(b)))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("err = %v, want it to mention %q", err, tt.want)
			}
		})
	}
	// Header length larger than the file.
	b := fileWith(`{}`, nil)
	binary.LittleEndian.PutUint64(b, 1000)
	if _, err := ParseHeader(b, int64(len(b))); err == nil || !strings.Contains(err.Error(), "exceeds the file") {
		t.Fatalf("err = %v", err)
	}
	if _, err := ParseHeader([]byte{1, 2}, 2); err == nil {
		t.Fatal("short file: no error")
	}
}

func TestRoundTrip(t *testing.T) {
	dir := t.TempDir()
	ts := []WriteTensor{
		{Name: "b", DType: BF16, Shape: []int{2, 3}, BF16: []uint16{0x3f80, 0xbf80, 0x4000, 0, 1, 0x7f80}},
		{Name: "a", DType: F32, Shape: []int{3}, F32: []float32{1.5, -2, 3.25}},
		{Name: "empty", DType: F32, Shape: []int{0, 4}, F32: []float32{}},
	}
	p := filepath.Join(dir, "model.safetensors")
	if err := WriteFile(p, ts, map[string]string{"format": "pt"}); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if diff := cmp.Diff([]string{"a", "b", "empty"}, c.Names()); diff != "" {
		t.Fatalf("names (-want +got):\n%s", diff)
	}
	a, err := c.Tensor("a")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]float32{1.5, -2, 3.25}, a.F32); diff != "" {
		t.Errorf("a (-want +got):\n%s", diff)
	}
	bt, err := c.Tensor("b")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(ts[0].BF16, bt.BF16); diff != "" || bt.DType() != BF16 {
		t.Errorf("b (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]int{2, 3}, bt.Shape); diff != "" {
		t.Errorf("b shape (-want +got):\n%s", diff)
	}
	if _, err := c.Tensor("nope"); err == nil {
		t.Error("missing tensor: no error")
	}
}

func TestF16(t *testing.T) {
	// 1.0, -2.0, 65504 (max half), 2^-24 (smallest subnormal), +inf
	raw := []uint16{0x3c00, 0xc000, 0x7bff, 0x0001, 0x7c00}
	data := make([]byte, 2*len(raw))
	for i, v := range raw {
		binary.LittleEndian.PutUint16(data[2*i:], v)
	}
	b := fileWith(`{"h":{"dtype":"F16","shape":[5],"data_offsets":[0,10]}}`, data)
	p := filepath.Join(t.TempDir(), "x.safetensors")
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
	f, err := Open(p)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := f.Tensor("h")
	if err != nil {
		t.Fatal(err)
	}
	inf := float32(1)
	for range 200 {
		inf *= 2
	}
	want := []float32{1, -2, 65504, 1.0 / (1 << 24), inf * inf}
	if diff := cmp.Diff(want, h.F32); diff != "" {
		t.Errorf("f16 (-want +got):\n%s", diff)
	}
}

func TestSharded(t *testing.T) {
	dir := t.TempDir()
	if err := WriteFile(filepath.Join(dir, "model-00001-of-00002.safetensors"), []WriteTensor{{Name: "x", DType: F32, Shape: []int{1}, F32: []float32{7}}}, nil); err != nil {
		t.Fatal(err)
	}
	if err := WriteFile(filepath.Join(dir, "model-00002-of-00002.safetensors"), []WriteTensor{{Name: "y", DType: F32, Shape: []int{1}, F32: []float32{8}}}, nil); err != nil {
		t.Fatal(err)
	}
	idx := `{"metadata":{},"weight_map":{"x":"model-00001-of-00002.safetensors","y":"model-00002-of-00002.safetensors"}}`
	if err := os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(idx), 0o644); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	y, err := c.Tensor("y")
	if err != nil || y.F32[0] != 8 {
		t.Fatalf("y = %v, %v", y.F32, err)
	}
	// An index pointing at the wrong shard is an error naming the tensor.
	bad := `{"weight_map":{"x":"model-00002-of-00002.safetensors"}}`
	os.WriteFile(filepath.Join(dir, "model.safetensors.index.json"), []byte(bad), 0o644)
	if _, err := OpenDir(dir); err == nil || !strings.Contains(err.Error(), "tensor x") {
		t.Fatalf("err = %v", err)
	}
}

func FuzzParseHeader(f *testing.F) {
	f.Add(fileWith(`{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(fileWith(`{"__metadata__":{"k":"v"},"b":{"dtype":"BF16","shape":[1,2],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(fileWith(`{"a":{"dtype":"F16","shape":[],"data_offsets":[0,2]}}`, make([]byte, 2)))
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := ParseHeader(b, int64(len(b)))
		if err != nil {
			return
		}
		// A header that parses must describe byte ranges inside the file that match the shapes.
		for _, ti := range h.Tensors {
			if h.DataStart+ti.End > int64(len(b)) || int64(ti.NumElements()*ti.DType.Size()) != ti.End-ti.Begin {
				t.Fatalf("accepted bad entry %+v", ti)
			}
		}
	})
}

func TestF32ToF16RoundTrip(t *testing.T) {
	// Every finite half value survives f16 → f32 → f16, and f32 values round to nearest.
	for h := 0; h < 1<<16; h++ {
		if h&0x7c00 == 0x7c00 && h&0x3ff != 0 {
			continue // NaN payloads
		}
		if got := F32ToF16(F16ToF32(uint16(h))); got != uint16(h) {
			t.Fatalf("%#04x → %v → %#04x", h, F16ToF32(uint16(h)), got)
		}
	}
	tests := []struct {
		in   float32
		want uint16
	}{
		{1 + 1.0/4096, 0x3c00},    // below half an ulp: down
		{1 + 3.0/4096, 0x3c01},    // 0.75 ulp: up
		{1e6, 0x7c00},             // overflow
		{-1e-10, 0x8000},          // underflow to -0
		{65504, 0x7bff},           // max
		{1.0 / (1 << 24), 0x0001}, // smallest subnormal
	}
	for _, tt := range tests {
		if got := F32ToF16(tt.in); got != tt.want {
			t.Errorf("F32ToF16(%v) = %#04x, want %#04x", tt.in, got, tt.want)
		}
	}
}

// TestEvictKeepsValues: evicting the mapped pages loses nothing: views taken before and after
// read the same values (they fault back in from the file).
func TestEvictKeepsValues(t *testing.T) {
	dir := t.TempDir()
	vals := make([]float32, 64<<10) // several pages
	for i := range vals {
		vals[i] = float32(i) * 0.5
	}
	if err := WriteFile(filepath.Join(dir, "model.safetensors"), []WriteTensor{{Name: "w", DType: F32, Shape: []int{len(vals)}, F32: vals}}, nil); err != nil {
		t.Fatal(err)
	}
	c, err := OpenDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	before, err := c.Tensor("w")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(vals, before.F32); diff != "" {
		t.Fatalf("before evicting (-want +got):\n%s", diff)
	}
	if err := c.Evict(); err != nil {
		t.Fatal(err)
	}
	after, err := c.Tensor("w")
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(vals, after.F32); diff != "" {
		t.Errorf("a view taken after evicting (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(vals, before.F32); diff != "" {
		t.Errorf("a view taken before evicting (-want +got):\n%s", diff)
	}
}
