package qwen

import (
	"fmt"
	"slices"
	"strings"
	"sync"

	"github.com/relevance-scoring/relevance/kernels"
	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
)

// TensorSource is where Load reads tensors from: a memory-mapped checkpoint
// (*safetensors.Checkpoint) or tensors held in memory (the generator).
type TensorSource interface {
	Names() []string
	Tensor(name string) (safetensors.Tensor, error)
}

// Layer is one decoder layer's weights. Norm weights and biases are f32 copies; matrices are
// views of the source (bf16 stays bf16).
type Layer struct {
	InputNorm, PostNorm        []float32
	Q, K, V, O                 *kernels.Weight
	QBias, KBias, VBias, OBias []float32 // nil when the architecture has none
	QNorm, KNorm               []float32 // per-head RMSNorm weights (Qwen3 family), nil otherwise

	Sparse bool
	// Dense MLP (Sparse false).
	Gate, Up, Down *kernels.Weight
	// MoE (Sparse true): router [E×H], experts, and the Qwen2-MoE shared expert with its [1×H] gate.
	Router     *kernels.Weight
	Experts    []kernels.Expert
	Shared     *kernels.Expert
	SharedGate *kernels.Weight
}

// Model is a loaded Qwen-family decoder with a score head of selected vocabulary rows.
type Model struct {
	Config *Config
	Layers []Layer
	Norm   []float32
	// Head holds the selected rows of lm_head (or of the tied embedding), in HeadRows order.
	Head     *kernels.Weight
	HeadRows []int
	// DType is the dtype of the matrices as loaded ("f32", "bf16", or "mixed").
	DType string
	// FusedExperts is true when the checkpoint stores experts as fused [E, …] tensors.
	FusedExperts bool
	// MoE runs the grouped expert GEMM under the node's policy; nil uses the kernels'
	// package-level runner.
	MoE *kernels.MoERunner
	// BeforeLayer, when set, is called before each layer of Forward with the layer's index; an
	// error fails the pass there. It exists for tests that inject a failure mid-pass.
	BeforeLayer func(layer int) error

	arenaMu sync.Mutex // held by Forward: one pass at a time uses the arena
	arena   buffers

	embed  safetensors.Tensor // [vocab, hidden]
	rope   *kernels.RoPETable
	maxPos int
}

// LoadOptions controls Load.
type LoadOptions struct {
	// HeadRows are the vocabulary rows of the head to compute (e.g. the "yes" and "no" ids).
	HeadRows []int
	// MaxPositions is the number of positions the RoPE table covers (the longest prompt).
	MaxPositions int
	// MoE is the expert-GEMM runner (policy, cost tables); nil uses the kernels' default.
	MoE *kernels.MoERunner
}

// loader tracks which tensors were used so that extras can be reported.
type loader struct {
	src    TensorSource
	names  map[string]bool
	used   map[string]bool
	dtypes map[safetensors.DType]bool
}

// Load builds a model from cfg and the tensors of src. Every expected tensor must be present with
// its exact shape, and no unexpected tensor may be present; errors name the tensor and layer.
func Load(cfg *Config, src TensorSource, opt LoadOptions) (*Model, error) {
	if opt.MaxPositions <= 0 {
		return nil, fmt.Errorf("load model: max positions must be > 0, got %d", opt.MaxPositions)
	}
	ld := &loader{src: src, names: map[string]bool{}, used: map[string]bool{}, dtypes: map[safetensors.DType]bool{}}
	m := &Model{Config: cfg, maxPos: opt.MaxPositions, MoE: opt.MoE}
	names := src.Names()
	for _, n := range names {
		ld.names[n] = true
		if strings.HasSuffix(n, ".mlp.experts.gate_up_proj") {
			m.FusedExperts = true
		}
	}
	H, hd := cfg.HiddenSize, cfg.HeadDim
	qd, kvd := cfg.NumAttentionHeads*hd, cfg.NumKeyValueHeads*hd

	var err error
	if m.embed, err = ld.tensor("model.embed_tokens.weight", cfg.VocabSize, H); err != nil {
		return nil, err
	}
	if m.Norm, err = ld.vector("model.norm.weight", H); err != nil {
		return nil, err
	}
	// The head is read only for the rows the score needs: building a Weight of the whole
	// vocabulary would pack (copy) vocab × hidden values just to keep two rows.
	head := m.embed
	if cfg.TieWordEmbeddings {
		// Some tied checkpoints still carry lm_head.weight; transformers ties it to the
		// embedding, so it is ignored here too.
		ld.used["lm_head.weight"] = true
	} else if head, err = ld.tensor("lm_head.weight", cfg.VocabSize, H); err != nil {
		return nil, err
	}
	for _, r := range opt.HeadRows {
		if r < 0 || r >= cfg.VocabSize {
			return nil, fmt.Errorf("load model: head row %d outside the vocabulary (%d)", r, cfg.VocabSize)
		}
	}
	if len(opt.HeadRows) > 0 {
		m.Head = pickRows(head, opt.HeadRows)
		m.HeadRows = slices.Clone(opt.HeadRows)
	}

	m.Layers = make([]Layer, cfg.NumHiddenLayers)
	for i := range m.Layers {
		if err := ld.layer(&m.Layers[i], cfg, i, m.FusedExperts, qd, kvd); err != nil {
			return nil, fmt.Errorf("layer %d: %w", i, err)
		}
	}
	var extra []string
	for _, n := range names {
		if !ld.used[n] && !strings.HasSuffix(n, ".rotary_emb.inv_freq") {
			extra = append(extra, n)
		}
	}
	if len(extra) > 0 {
		if len(extra) > 5 {
			extra = append(extra[:5], fmt.Sprintf("… (%d in all)", len(extra)))
		}
		return nil, fmt.Errorf("load model: unexpected tensors for %s: %s", cfg.Arch(), strings.Join(extra, ", "))
	}
	switch {
	case ld.dtypes[safetensors.BF16] && !ld.dtypes[safetensors.F32]:
		m.DType = "bf16"
	case !ld.dtypes[safetensors.BF16]:
		m.DType = "f32"
	default:
		m.DType = "mixed"
	}
	m.rope = kernels.NewRoPETable(opt.MaxPositions, hd, cfg.RopeTheta)
	return m, nil
}

func (ld *loader) layer(l *Layer, cfg *Config, i int, fused bool, qd, kvd int) error {
	H, hd := cfg.HiddenSize, cfg.HeadDim
	p := fmt.Sprintf("model.layers.%d.", i)
	var err error
	// The "layer N:" context is added by the caller; names here are relative to the layer.
	mat := func(name string, n, k int) *kernels.Weight {
		if err != nil {
			return nil
		}
		var w *kernels.Weight
		w, err = ld.matrix(p+name, n, k)
		return w
	}
	vec := func(name string, n int) []float32 {
		if err != nil {
			return nil
		}
		var v []float32
		v, err = ld.vector(p+name, n)
		return v
	}
	l.InputNorm = vec("input_layernorm.weight", H)
	l.PostNorm = vec("post_attention_layernorm.weight", H)
	l.Q = mat("self_attn.q_proj.weight", qd, H)
	l.K = mat("self_attn.k_proj.weight", kvd, H)
	l.V = mat("self_attn.v_proj.weight", kvd, H)
	l.O = mat("self_attn.o_proj.weight", H, qd)
	if cfg.HasQKVBias() {
		l.QBias = vec("self_attn.q_proj.bias", qd)
		l.KBias = vec("self_attn.k_proj.bias", kvd)
		l.VBias = vec("self_attn.v_proj.bias", kvd)
	}
	if cfg.HasOBias() {
		l.OBias = vec("self_attn.o_proj.bias", H)
	}
	if cfg.HasQKNorm() {
		l.QNorm = vec("self_attn.q_norm.weight", hd)
		l.KNorm = vec("self_attn.k_norm.weight", hd)
	}
	l.Sparse = cfg.IsSparse(i)
	if !l.Sparse {
		I := cfg.IntermediateSize
		l.Gate = mat("mlp.gate_proj.weight", I, H)
		l.Up = mat("mlp.up_proj.weight", I, H)
		l.Down = mat("mlp.down_proj.weight", H, I)
		return err
	}
	E, I := cfg.NumExperts, cfg.MoEIntermediateSize
	l.Router = mat("mlp.gate.weight", E, H)
	if err != nil {
		return err
	}
	l.Experts = make([]kernels.Expert, E)
	if fused {
		gu, err := ld.tensor(p+"mlp.experts.gate_up_proj", E, 2*I, H)
		if err != nil {
			return err
		}
		dn, err := ld.tensor(p+"mlp.experts.down_proj", E, H, I)
		if err != nil {
			return err
		}
		// Zero-copy sub-views: expert e's gate rows come first, then its up rows.
		for e := range l.Experts {
			l.Experts[e] = kernels.Expert{
				Gate: subWeight(gu, e*2*I*H, I, H),
				Up:   subWeight(gu, (e*2*I+I)*H, I, H),
				Down: subWeight(dn, e*H*I, H, I),
			}
		}
	} else {
		for e := range l.Experts {
			ep := fmt.Sprintf("mlp.experts.%d.", e)
			l.Experts[e] = kernels.Expert{
				Gate: mat(ep+"gate_proj.weight", I, H),
				Up:   mat(ep+"up_proj.weight", I, H),
				Down: mat(ep+"down_proj.weight", H, I),
			}
		}
	}
	if cfg.HasSharedExpert() {
		S := cfg.SharedExpertIntermediateSize
		l.Shared = &kernels.Expert{
			Gate: mat("mlp.shared_expert.gate_proj.weight", S, H),
			Up:   mat("mlp.shared_expert.up_proj.weight", S, H),
			Down: mat("mlp.shared_expert.down_proj.weight", H, S),
		}
		l.SharedGate = mat("mlp.shared_expert_gate.weight", 1, H)
	}
	return err
}

// tensor fetches a tensor and checks its shape.
func (ld *loader) tensor(name string, shape ...int) (safetensors.Tensor, error) {
	short := shortName(name)
	if !ld.names[name] {
		return safetensors.Tensor{}, fmt.Errorf("missing %s", short)
	}
	t, err := ld.src.Tensor(name)
	if err != nil {
		return t, fmt.Errorf("%s: %w", short, err)
	}
	if !slices.Equal(t.Shape, shape) {
		return t, fmt.Errorf("%s: shape %v, want %v", short, t.Shape, shape)
	}
	ld.used[name] = true
	ld.dtypes[t.DType()] = true
	return t, nil
}

func (ld *loader) matrix(name string, n, k int) (*kernels.Weight, error) {
	t, err := ld.tensor(name, n, k)
	if err != nil {
		return nil, err
	}
	return toWeight(t), nil
}

func (ld *loader) vector(name string, n int) ([]float32, error) {
	t, err := ld.tensor(name, n)
	if err != nil {
		return nil, err
	}
	return widen(t), nil
}

// shortName strips "model.layers.N." so that errors read "layer 3: missing self_attn.q_norm.weight".
func shortName(name string) string {
	if rest, ok := strings.CutPrefix(name, "model.layers."); ok {
		if i := strings.IndexByte(rest, '.'); i >= 0 {
			return rest[i+1:]
		}
	}
	return name
}

func toWeight(t safetensors.Tensor) *kernels.Weight {
	n, k := t.Shape[0], t.Shape[1]
	if t.BF16 != nil {
		return kernels.NewWeightBF16(t.BF16, n, k)
	}
	return kernels.NewWeightF32(t.F32, n, k)
}

// pickRows copies the given rows of a [vocab, hidden] tensor into a small Weight.
func pickRows(t safetensors.Tensor, rows []int) *kernels.Weight {
	k := t.Shape[1]
	if t.BF16 != nil {
		out := make([]uint16, 0, len(rows)*k)
		for _, r := range rows {
			out = append(out, t.BF16[r*k:(r+1)*k]...)
		}
		return kernels.NewWeightBF16(out, len(rows), k)
	}
	out := make([]float32, 0, len(rows)*k)
	for _, r := range rows {
		out = append(out, t.F32[r*k:(r+1)*k]...)
	}
	return kernels.NewWeightF32(out, len(rows), k)
}

func subWeight(t safetensors.Tensor, off, n, k int) *kernels.Weight {
	if t.BF16 != nil {
		return kernels.NewWeightBF16(t.BF16[off:off+n*k:off+n*k], n, k)
	}
	return kernels.NewWeightF32(t.F32[off:off+n*k:off+n*k], n, k)
}

// widen returns a tensor's values as a new f32 slice.
func widen(t safetensors.Tensor) []float32 {
	if t.BF16 != nil {
		out := make([]float32, len(t.BF16))
		kernels.BF16ToF32(out, t.BF16)
		return out
	}
	return slices.Clone(t.F32)
}

// embedRow writes the embedding of token id into dst.
func (m *Model) embedRow(dst []float32, id int32) {
	H := m.Config.HiddenSize
	if m.embed.BF16 != nil {
		kernels.BF16ToF32(dst[:H], m.embed.BF16[int(id)*H:(int(id)+1)*H])
		return
	}
	copy(dst[:H], m.embed.F32[int(id)*H:(int(id)+1)*H])
}

// MaxPositions is the longest sequence (prefix + item) Forward accepts.
func (m *Model) MaxPositions() int { return m.maxPos }
