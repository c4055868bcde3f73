package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"sort"

	"github.com/relevance-scoring/relevance/internal/atomicfile"
)

// WriteTensor is one tensor to write: raw little-endian values of DType.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int
	// F32 holds the values of an F32 tensor; BF16 the raw bits of a BF16 or F16 tensor.
	F32  []float32
	BF16 []uint16
}

// Write writes tensors (sorted by name, as the Python library does) and optional metadata in the
// safetensors format. The header is padded with spaces to a multiple of 8 bytes so that the data
// section is aligned for in-place f32 views.
func Write(w io.Writer, tensors []WriteTensor, metadata map[string]string) error {
	ts := append([]WriteTensor(nil), tensors...)
	sort.Slice(ts, func(i, j int) bool { return ts[i].Name < ts[j].Name })
	header := map[string]any{}
	if len(metadata) > 0 {
		header["__metadata__"] = metadata
	}
	var off int64
	for _, t := range ts {
		n := 1
		for _, d := range t.Shape {
			n *= d
		}
		var size int64
		switch {
		case t.DType == F32 && len(t.F32) == n:
			size = int64(n) * 4
		case (t.DType == BF16 || t.DType == F16) && len(t.BF16) == n:
			size = int64(n) * 2
		default:
			return fmt.Errorf("write safetensors: tensor %s: %s values do not match shape %v", t.Name, t.DType, t.Shape)
		}
		header[t.Name] = map[string]any{"dtype": t.DType, "shape": t.Shape, "data_offsets": []int64{off, off + size}}
		off += size
	}
	hb, err := json.Marshal(header)
	if err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	for (8+len(hb))%8 != 0 {
		hb = append(hb, ' ')
	}
	bw := bufio.NewWriterSize(w, 1<<20)
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hb)))
	bw.Write(lenBuf[:])
	bw.Write(hb)
	// Values are encoded a chunk at a time: one Write per element would dominate the time of
	// writing a large embedding.
	chunk := make([]byte, 0, 1<<16)
	for _, t := range ts {
		if t.DType == F32 {
			for _, v := range t.F32 {
				chunk = binary.LittleEndian.AppendUint32(chunk, math.Float32bits(v))
				if len(chunk) == cap(chunk) {
					bw.Write(chunk)
					chunk = chunk[:0]
				}
			}
		} else {
			for _, v := range t.BF16 {
				chunk = binary.LittleEndian.AppendUint16(chunk, v)
				if len(chunk) == cap(chunk) {
					bw.Write(chunk)
					chunk = chunk[:0]
				}
			}
		}
	}
	bw.Write(chunk)
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	return nil
}

// WriteFile writes tensors to path (see Write). It writes a temporary file beside path and renames
// it into place, so a process that has the old file memory-mapped keeps its (now unlinked) copy
// instead of faulting on a file truncated under it.
func WriteFile(path string, tensors []WriteTensor, metadata map[string]string) error {
	var werr error // Write's own error, already wrapped
	err := atomicfile.Write(path, func(w io.Writer) error {
		werr = Write(w, tensors, metadata)
		return werr
	})
	if err != nil && err != werr {
		return fmt.Errorf("write safetensors: %w", err)
	}
	return err
}

// F32ToF16 narrows f32 to IEEE half-precision bits, rounding to nearest even; values beyond the
// half range become ±inf, tiny ones subnormal or zero.
func F32ToF16(f float32) uint16 {
	b := math.Float32bits(f)
	sign := uint16(b>>16) & 0x8000
	exp := int32(b>>23&0xff) - 127 + 15
	mant := b & 0x7fffff
	switch {
	case b&0x7fffffff > 0x7f800000: // NaN
		return sign | 0x7e00
	case exp >= 0x1f: // inf or overflow
		return sign | 0x7c00
	case exp <= 0: // subnormal or zero
		if exp < -10 {
			return sign
		}
		mant |= 0x800000
		shift := uint32(14 - exp)
		h := mant >> shift
		rem := mant & (1<<shift - 1)
		half := uint32(1) << (shift - 1)
		if rem > half || (rem == half && h&1 == 1) {
			h++
		}
		return sign | uint16(h)
	}
	h := uint32(exp)<<10 | mant>>13
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && h&1 == 1) {
		h++ // may carry into the exponent, up to inf: still correct
	}
	return sign | uint16(h)
}
