package safetensors

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"sort"
	"syscall"
	"unsafe"
)

// Tensor is a tensor's values: exactly one of F32 and BF16 is set (F16 files are widened to F32).
// F32 and BF16 may be views of a memory-mapped file: read-only, valid until the file is closed.
type Tensor struct {
	Name  string
	Shape []int
	F32   []float32
	BF16  []uint16
}

// DType is the dtype of the values as held (F32 or BF16).
func (t Tensor) DType() DType {
	if t.BF16 != nil {
		return BF16
	}
	return F32
}

// File is one memory-mapped safetensors file.
type File struct {
	path   string
	data   []byte // the whole mapped file
	header *Header
	index  map[string]int
}

// Open memory-maps and parses one safetensors file.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("open safetensors: %w", err)
	}
	size := st.Size()
	if size < 8 {
		return nil, fmt.Errorf("open safetensors %s: file too short (%d bytes)", path, size)
	}
	if size > math.MaxInt {
		return nil, fmt.Errorf("open safetensors %s: file too large", path)
	}
	data, err := syscall.Mmap(int(f.Fd()), 0, int(size), syscall.PROT_READ, syscall.MAP_SHARED)
	if err != nil {
		return nil, fmt.Errorf("open safetensors %s: mmap: %w", path, err)
	}
	h, err := ParseHeader(data, size)
	if err != nil {
		_ = syscall.Munmap(data)
		return nil, fmt.Errorf("open %s: %w", path, err)
	}
	sf := &File{path: path, data: data, header: h, index: make(map[string]int, len(h.Tensors))}
	for i, t := range h.Tensors {
		sf.index[t.Name] = i
	}
	return sf, nil
}

// Close unmaps the file; views returned by Tensor become invalid.
func (f *File) Close() error {
	if f.data == nil {
		return nil
	}
	err := syscall.Munmap(f.data)
	f.data = nil
	return err
}

// Header is the parsed header.
func (f *File) Header() *Header { return f.header }

// Info returns the header entry of a tensor.
func (f *File) Info(name string) (TensorInfo, bool) {
	i, ok := f.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.header.Tensors[i], true
}

// Tensor returns a tensor's values: a view of the map for F32 and BF16 (when suitably aligned, a
// copy otherwise), a widened f32 copy for F16.
func (f *File) Tensor(name string) (Tensor, error) {
	info, ok := f.Info(name)
	if !ok {
		return Tensor{}, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	b := f.data[f.header.DataStart+info.Begin : f.header.DataStart+info.End]
	n := info.NumElements()
	t := Tensor{Name: name, Shape: info.Shape}
	switch info.DType {
	case F32:
		if n == 0 {
			t.F32 = []float32{}
		} else if uintptr(unsafe.Pointer(&b[0]))%4 == 0 {
			t.F32 = unsafe.Slice((*float32)(unsafe.Pointer(&b[0])), n)
		} else {
			t.F32 = make([]float32, n)
			for i := range t.F32 {
				t.F32[i] = math.Float32frombits(uint32(b[4*i]) | uint32(b[4*i+1])<<8 | uint32(b[4*i+2])<<16 | uint32(b[4*i+3])<<24)
			}
		}
	case BF16:
		if n == 0 {
			t.BF16 = []uint16{}
		} else if uintptr(unsafe.Pointer(&b[0]))%2 == 0 {
			t.BF16 = unsafe.Slice((*uint16)(unsafe.Pointer(&b[0])), n)
		} else {
			t.BF16 = make([]uint16, n)
			for i := range t.BF16 {
				t.BF16[i] = uint16(b[2*i]) | uint16(b[2*i+1])<<8
			}
		}
	case F16:
		t.F32 = make([]float32, n)
		for i := range t.F32 {
			t.F32[i] = F16ToF32(uint16(b[2*i]) | uint16(b[2*i+1])<<8)
		}
	}
	return t, nil
}

// F16ToF32 widens IEEE half-precision bits to f32 (exact, subnormals, infinities and NaN included).
func F16ToF32(h uint16) float32 {
	sign := uint32(h>>15) << 31
	exp := uint32(h>>10) & 0x1f
	mant := uint32(h) & 0x3ff
	switch {
	case exp == 0x1f: // inf / NaN
		return math.Float32frombits(sign | 0x7f800000 | mant<<13)
	case exp == 0:
		if mant == 0 {
			return math.Float32frombits(sign)
		}
		// Subnormal half: value = mant · 2^-24.
		v := float32(mant) * (1.0 / (1 << 24))
		if sign != 0 {
			v = -v
		}
		return v
	}
	return math.Float32frombits(sign | (exp+127-15)<<23 | mant<<13)
}

// Checkpoint is a model's tensors, from one file or from the shards named by an index.
type Checkpoint struct {
	files  []*File
	byName map[string]*File
}

// OpenDir opens the tensors of a Hugging Face checkpoint folder: model.safetensors.index.json and
// its shards when the index exists, model.safetensors otherwise.
func OpenDir(dir string) (*Checkpoint, error) {
	c := &Checkpoint{byName: map[string]*File{}}
	idxPath := filepath.Join(dir, "model.safetensors.index.json")
	if b, err := os.ReadFile(idxPath); err == nil {
		var idx struct {
			WeightMap map[string]string `json:"weight_map"`
		}
		if err := json.Unmarshal(b, &idx); err != nil {
			return nil, fmt.Errorf("read %s: %w", idxPath, err)
		}
		if len(idx.WeightMap) == 0 {
			return nil, fmt.Errorf("read %s: weight_map is empty", idxPath)
		}
		shards := map[string]*File{}
		var names []string
		for _, s := range idx.WeightMap {
			if _, ok := shards[s]; !ok {
				shards[s] = nil
				names = append(names, s)
			}
		}
		sort.Strings(names)
		for _, s := range names {
			if s != filepath.Base(s) {
				c.Close()
				return nil, fmt.Errorf("read %s: shard name %q must be a file in the folder", idxPath, s)
			}
			f, err := Open(filepath.Join(dir, s))
			if err != nil {
				c.Close()
				return nil, err
			}
			shards[s] = f
			c.files = append(c.files, f)
		}
		for name, s := range idx.WeightMap {
			f := shards[s]
			if _, ok := f.Info(name); !ok {
				c.Close()
				return nil, fmt.Errorf("read %s: tensor %s is mapped to %s, which does not hold it", idxPath, name, s)
			}
			c.byName[name] = f
		}
		// Tensors present in a shard but not in the index are still part of the checkpoint. No
		// tensor may be in two shards, indexed or not: which copy is meant would depend on the
		// reader (the index here, the last shard loaded in transformers 4), and the fingerprint,
		// which hashes the shards and not the index, would not see a repointed index.
		holder := map[string]string{}
		for i, f := range c.files {
			for _, t := range f.header.Tensors {
				if other, ok := holder[t.Name]; ok {
					c.Close()
					return nil, fmt.Errorf("read %s: tensor %s is in both %s and %s", idxPath, t.Name, other, names[i])
				}
				holder[t.Name] = names[i]
				if _, indexed := idx.WeightMap[t.Name]; !indexed {
					c.byName[t.Name] = f
				}
			}
		}
		return c, nil
	} else if !os.IsNotExist(err) {
		return nil, fmt.Errorf("read %s: %w", idxPath, err)
	}
	f, err := Open(filepath.Join(dir, "model.safetensors"))
	if err != nil {
		return nil, err
	}
	c.files = []*File{f}
	for _, t := range f.header.Tensors {
		c.byName[t.Name] = f
	}
	return c, nil
}

// Names lists every tensor, sorted.
func (c *Checkpoint) Names() []string {
	out := make([]string, 0, len(c.byName))
	for n := range c.byName {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Info returns a tensor's header entry.
func (c *Checkpoint) Info(name string) (TensorInfo, bool) {
	f, ok := c.byName[name]
	if !ok {
		return TensorInfo{}, false
	}
	return f.Info(name)
}

// Tensor returns a tensor's values (see File.Tensor).
func (c *Checkpoint) Tensor(name string) (Tensor, error) {
	f, ok := c.byName[name]
	if !ok {
		return Tensor{}, fmt.Errorf("%s: %w", name, ErrNotFound)
	}
	return f.Tensor(name)
}

// Close unmaps every file.
func (c *Checkpoint) Close() error {
	var first error
	for _, f := range c.files {
		if err := f.Close(); err != nil && first == nil {
			first = err
		}
	}
	return first
}

// fingerprintStride is the spacing of the weight samples Fingerprint hashes: one 4 KiB sample
// per MiB reads 0.4 % of the weights (≈ 5 MB of a 1.2 GB checkpoint), cheap at start-up, yet any
// retraining or fine-tune (which changes every tensor) changes the fingerprint.
const (
	fingerprintStride = 1 << 20
	fingerprintSample = 4 << 10
)

// Fingerprint is a SHA-256 identifying the checkpoint's contents without reading all of it: for
// each file (in shard order) its size, its whole header (names, dtypes, shapes, offsets) and
// samples of its tensor bytes (the first and last 4 KiB and 4 KiB every MiB). Two checkpoints
// of the same shape but different weights (e.g. gen-model seeds) differ in the samples.
func (c *Checkpoint) Fingerprint() [32]byte {
	h := sha256.New()
	var n [8]byte
	for _, f := range c.files {
		binary.LittleEndian.PutUint64(n[:], uint64(len(f.data)))
		h.Write(n[:])
		h.Write(f.data[:f.header.DataStart])
		body := f.data[f.header.DataStart:]
		for off := 0; off < len(body); off += fingerprintStride {
			h.Write(body[off:min(off+fingerprintSample, len(body))])
		}
		h.Write(body[max(0, len(body)-fingerprintSample):])
	}
	var sum [32]byte
	copy(sum[:], h.Sum(nil))
	return sum
}

// Evict drops the checkpoint's mapped pages from this process's resident memory (madvise
// MADV_DONTNEED on the read-only shared file mappings). Nothing is lost: a page read again is
// faulted back in from the page cache or the file. Call it once the weights that the forward pass
// reads have been copied out (packed): loading touched every page of the file, and without this
// they stay counted in the process's RSS beside the packed copies — the weights held twice.
func (c *Checkpoint) Evict() error {
	var errs []error
	for _, f := range c.files {
		if err := syscall.Madvise(f.data, syscall.MADV_DONTNEED); err != nil {
			errs = append(errs, fmt.Errorf("evict %s: %w", f.path, err))
		}
	}
	return errors.Join(errs...)
}
