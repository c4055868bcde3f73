package safetensors

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"os"
	"sort"
)

// WriteTensor is one tensor to write: raw little-endian values of DType.
type WriteTensor struct {
	Name  string
	DType DType
	Shape []int
	// Exactly one of F32 (written as F32) and BF16 (written as BF16) is set.
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
		case t.DType == BF16 && len(t.BF16) == n:
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

// WriteFile writes tensors to path (see Write).
func WriteFile(path string, tensors []WriteTensor, metadata map[string]string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("write safetensors: %w", err)
	}
	if err := Write(f, tensors, metadata); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
