// Package safetensors reads and writes the Hugging Face safetensors format: an 8-byte little-endian
// header length, a JSON header naming each tensor's dtype, shape and byte range, then the raw
// little-endian tensor data.
//
// Files are memory-mapped read-only: F32 and BF16 tensors are returned as views of the map (so a
// bf16 checkpoint stays bf16 in memory and start-up does not copy the weights); F16 tensors are
// widened to f32 copies. The header parser validates every field and never panics on malformed
// input (see FuzzParseHeader).
//
// A File or Checkpoint is immutable after Open and safe for concurrent reads; views it returns are
// valid until Close.
package safetensors

import (
	"bytes"
	"cmp"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"sort"
)

// DType is a tensor element type as spelled in the header.
type DType string

// The element types this package reads.
const (
	F32  DType = "F32"
	BF16 DType = "BF16"
	F16  DType = "F16"
)

// Size is the bytes per element (0 for an unknown dtype).
func (d DType) Size() int {
	switch d {
	case F32:
		return 4
	case BF16, F16:
		return 2
	}
	return 0
}

// TensorInfo is one header entry. Begin and End are byte offsets relative to the start of the
// data section (as in the file).
type TensorInfo struct {
	Name       string
	DType      DType
	Shape      []int
	Begin, End int64
}

// NumElements is the product of the shape (1 for a scalar).
func (t TensorInfo) NumElements() int {
	n := 1
	for _, d := range t.Shape {
		n *= d
	}
	return n
}

// maxHeaderBytes bounds the JSON header; real checkpoints have headers of a few hundred KiB.
const maxHeaderBytes = 100 << 20

// Header is a parsed safetensors header.
type Header struct {
	// Tensors sorted by name.
	Tensors []TensorInfo
	// Metadata is the optional "__metadata__" string map.
	Metadata map[string]string
	// DataStart is the file offset of the data section (8 + header length).
	DataStart int64
}

type rawEntry struct {
	DType       string  `json:"dtype"`
	Shape       []int64 `json:"shape"`
	DataOffsets []int64 `json:"data_offsets"`
}

// ParseHeader parses and validates the header of a safetensors file whose whole contents (or at
// least its header, when fileSize is given separately) are in data. fileSize is the total file
// size, used to check that every tensor's byte range lies inside the data section.
func ParseHeader(data []byte, fileSize int64) (*Header, error) {
	if len(data) < 8 {
		return nil, fmt.Errorf("safetensors: file too short for a header length (%d bytes)", len(data))
	}
	n := binary.LittleEndian.Uint64(data[:8])
	if n > maxHeaderBytes {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the %d-byte limit", n, maxHeaderBytes)
	}
	if n > uint64(len(data)-8) || int64(n)+8 > fileSize {
		return nil, fmt.Errorf("safetensors: header length %d exceeds the file (%d bytes)", n, fileSize)
	}
	raw, err := headerEntries(data[8 : 8+n])
	if err != nil {
		return nil, err
	}
	h := &Header{DataStart: 8 + int64(n)}
	dataLen := fileSize - h.DataStart
	for name, msg := range raw {
		if name == "__metadata__" {
			if err := json.Unmarshal(msg, &h.Metadata); err != nil {
				return nil, fmt.Errorf("safetensors: __metadata__: must map strings to strings: %w", err)
			}
			continue
		}
		t, err := parseEntry(name, msg, dataLen)
		if err != nil {
			return nil, err
		}
		h.Tensors = append(h.Tensors, t)
	}
	// No two tensors may share bytes (the safetensors library refuses such files too): two
	// weights aliasing one range is a corrupt or hostile file, not a checkpoint.
	byOffset := slices.Clone(h.Tensors)
	slices.SortFunc(byOffset, func(a, b TensorInfo) int { return cmp.Or(cmp.Compare(a.Begin, b.Begin), cmp.Compare(a.End, b.End)) })
	for i := 1; i < len(byOffset); i++ {
		if p, t := byOffset[i-1], byOffset[i]; t.Begin < p.End {
			return nil, fmt.Errorf("safetensors: tensors %q [%d, %d) and %q [%d, %d) overlap", p.Name, p.Begin, p.End, t.Name, t.Begin, t.End)
		}
	}
	sort.Slice(h.Tensors, func(i, j int) bool { return h.Tensors[i].Name < h.Tensors[j].Name })
	return h, nil
}

// headerEntries decodes the header's top-level object, refusing a name given twice (a map decode
// would keep the last silently: which weight is meant would be ambiguous).
func headerEntries(b []byte) (map[string]json.RawMessage, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	bad := func(err error) error { return fmt.Errorf("safetensors: header is not a JSON object: %w", err) }
	if tok, err := dec.Token(); err != nil {
		return nil, bad(err)
	} else if tok != json.Delim('{') {
		return nil, bad(fmt.Errorf("starts with %v", tok))
	}
	raw := map[string]json.RawMessage{}
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, bad(err)
		}
		name, _ := tok.(string)
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil, bad(err)
		}
		if _, dup := raw[name]; dup {
			return nil, fmt.Errorf("safetensors: header names %q twice", name)
		}
		raw[name] = v
	}
	if _, err := dec.Token(); err != nil { // the closing brace
		return nil, bad(err)
	}
	return raw, nil
}

func parseEntry(name string, msg json.RawMessage, dataLen int64) (TensorInfo, error) {
	var e rawEntry
	if err := json.Unmarshal(msg, &e); err != nil {
		return TensorInfo{}, fmt.Errorf("safetensors: tensor %q: bad entry: %w", name, err)
	}
	t := TensorInfo{Name: name, DType: DType(e.DType)}
	size := t.DType.Size()
	if size == 0 {
		return t, fmt.Errorf("safetensors: tensor %q: unsupported dtype %q (want F32, BF16 or F16)", name, e.DType)
	}
	if len(e.DataOffsets) != 2 {
		return t, fmt.Errorf("safetensors: tensor %q: data_offsets must have 2 values, got %d", name, len(e.DataOffsets))
	}
	// Element count with overflow checks: a hostile shape must not wrap around to a small size.
	count := uint64(1)
	t.Shape = make([]int, len(e.Shape))
	for i, d := range e.Shape {
		if d < 0 || d > math.MaxInt32 {
			return t, fmt.Errorf("safetensors: tensor %q: bad dimension %d in shape %v", name, d, e.Shape)
		}
		t.Shape[i] = int(d)
		hi, lo := bits.Mul64(count, uint64(d))
		if hi != 0 || lo > math.MaxInt64/8 {
			return t, fmt.Errorf("safetensors: tensor %q: shape %v is too large", name, e.Shape)
		}
		count = lo
	}
	t.Begin, t.End = e.DataOffsets[0], e.DataOffsets[1]
	if t.Begin < 0 || t.End < t.Begin || t.End > dataLen {
		return t, fmt.Errorf("safetensors: tensor %q: data_offsets [%d, %d] outside the data section (%d bytes)", name, t.Begin, t.End, dataLen)
	}
	if want := count * uint64(size); uint64(t.End-t.Begin) != want {
		return t, fmt.Errorf("safetensors: tensor %q: %d bytes for shape %v of %s, want %d", name, t.End-t.Begin, e.Shape, e.DType, want)
	}
	return t, nil
}

// ErrNotFound is returned (wrapped) for a tensor name that is not in a file or checkpoint.
var ErrNotFound = errors.New("tensor not found")
