package qwen

import (
	"math"
	"sort"
	"testing"

	"github.com/relevance-scoring/relevance/scorer/model/safetensors"
)

// refModel is a float64 reference of the Hugging Face forward pass, written plainly and
// independently of the optimised path: its own loops, softmax, RoPE, attention and MoE, and the
// full vocabulary head. It reads the generated tensors (bf16 values widened exactly, so it runs
// on the same rounded weights as the model under test).
type refModel struct {
	cfg *Config
	t   map[string][]float64
}

func newRef(tb testing.TB, cfg *Config, ts []safetensors.WriteTensor) *refModel {
	tb.Helper()
	r := &refModel{cfg: cfg, t: map[string][]float64{}}
	for _, t := range ts {
		var v []float64
		if t.BF16 != nil {
			v = make([]float64, len(t.BF16))
			for i, b := range t.BF16 {
				v[i] = float64(math.Float32frombits(uint32(b) << 16))
			}
		} else {
			v = make([]float64, len(t.F32))
			for i, f := range t.F32 {
				v[i] = float64(f)
			}
		}
		r.t[t.Name] = v
	}
	return r
}

func (r *refModel) w(tb testing.TB, name string) []float64 {
	tb.Helper()
	v, ok := r.t[name]
	if !ok {
		tb.Fatalf("reference: no tensor %s", name)
	}
	return v
}

// linear computes W·x (+b) for W [n×k] row-major.
func refLinear(w []float64, x []float64, n int, bias []float64) []float64 {
	k := len(x)
	y := make([]float64, n)
	for i := 0; i < n; i++ {
		s := 0.0
		for j := 0; j < k; j++ {
			s += w[i*k+j] * x[j]
		}
		if bias != nil {
			s += bias[i]
		}
		y[i] = s
	}
	return y
}

func refRMSNorm(x, w []float64, eps float64) []float64 {
	ss := 0.0
	for _, v := range x {
		ss += v * v
	}
	inv := 1 / math.Sqrt(ss/float64(len(x))+eps)
	y := make([]float64, len(x))
	for i := range x {
		y[i] = x[i] * inv * w[i]
	}
	return y
}

func refRoPE(v []float64, pos int, theta float64) {
	hd := len(v)
	half := hd / 2
	out := make([]float64, hd)
	for i := 0; i < hd; i++ {
		f := i % half
		ang := float64(pos) / math.Pow(theta, float64(2*f)/float64(hd))
		// rotate_half: (-x2, x1)
		var rot float64
		if i < half {
			rot = -v[i+half]
		} else {
			rot = v[i-half]
		}
		out[i] = v[i]*math.Cos(ang) + rot*math.Sin(ang)
	}
	copy(v, out)
}

func refSiLU(x float64) float64 { return x / (1 + math.Exp(-x)) }

func refMLP(x, gate, up, down []float64, inter int) []float64 {
	g := refLinear(gate, x, inter, nil)
	u := refLinear(up, x, inter, nil)
	for i := range g {
		g[i] = refSiLU(g[i]) * u[i]
	}
	return refLinear(down, g, len(x), nil)
}

// logits runs one whole sequence and returns the full-vocabulary logits at its last position.
func (r *refModel) logits(tb testing.TB, ids []int32) []float64 {
	tb.Helper()
	c := r.cfg
	H, hd, nh, nkv := c.HiddenSize, c.HeadDim, c.NumAttentionHeads, c.NumKeyValueHeads
	T := len(ids)
	emb := r.w(tb, "model.embed_tokens.weight")
	x := make([][]float64, T)
	for t, id := range ids {
		x[t] = append([]float64(nil), emb[int(id)*H:(int(id)+1)*H]...)
	}
	opt := func(name string) []float64 { return r.t[name] }
	for l := 0; l < c.NumHiddenLayers; l++ {
		p := "model.layers." + itoa(l) + "."
		q := make([][]float64, T)
		k := make([][]float64, T)
		v := make([][]float64, T)
		for t := 0; t < T; t++ {
			xn := refRMSNorm(x[t], r.w(tb, p+"input_layernorm.weight"), c.RMSNormEps)
			q[t] = refLinear(r.w(tb, p+"self_attn.q_proj.weight"), xn, nh*hd, opt(p+"self_attn.q_proj.bias"))
			k[t] = refLinear(r.w(tb, p+"self_attn.k_proj.weight"), xn, nkv*hd, opt(p+"self_attn.k_proj.bias"))
			v[t] = refLinear(r.w(tb, p+"self_attn.v_proj.weight"), xn, nkv*hd, opt(p+"self_attn.v_proj.bias"))
			for h := 0; h < nh; h++ {
				qh := q[t][h*hd : (h+1)*hd]
				if c.HasQKNorm() {
					copy(qh, refRMSNorm(qh, r.w(tb, p+"self_attn.q_norm.weight"), c.RMSNormEps))
				}
				refRoPE(qh, t, c.RopeTheta)
			}
			for h := 0; h < nkv; h++ {
				kh := k[t][h*hd : (h+1)*hd]
				if c.HasQKNorm() {
					copy(kh, refRMSNorm(kh, r.w(tb, p+"self_attn.k_norm.weight"), c.RMSNormEps))
				}
				refRoPE(kh, t, c.RopeTheta)
			}
		}
		for t := 0; t < T; t++ {
			att := make([]float64, nh*hd)
			for h := 0; h < nh; h++ {
				kv := h / (nh / nkv)
				sc := make([]float64, t+1)
				mx := math.Inf(-1)
				for u := 0; u <= t; u++ {
					s := 0.0
					for d := 0; d < hd; d++ {
						s += q[t][h*hd+d] * k[u][kv*hd+d]
					}
					sc[u] = s / math.Sqrt(float64(hd))
					mx = math.Max(mx, sc[u])
				}
				sum := 0.0
				for u := range sc {
					sc[u] = math.Exp(sc[u] - mx)
					sum += sc[u]
				}
				for u := range sc {
					for d := 0; d < hd; d++ {
						att[h*hd+d] += sc[u] / sum * v[u][kv*hd+d]
					}
				}
			}
			o := refLinear(r.w(tb, p+"self_attn.o_proj.weight"), att, H, opt(p+"self_attn.o_proj.bias"))
			for i := range o {
				x[t][i] += o[i]
			}
		}
		for t := 0; t < T; t++ {
			xn := refRMSNorm(x[t], r.w(tb, p+"post_attention_layernorm.weight"), c.RMSNormEps)
			var y []float64
			if c.IsSparse(l) {
				y = r.moe(tb, p, xn)
			} else {
				I := c.IntermediateSize
				y = refMLP(xn, r.w(tb, p+"mlp.gate_proj.weight"), r.w(tb, p+"mlp.up_proj.weight"), r.w(tb, p+"mlp.down_proj.weight"), I)
			}
			for i := range y {
				x[t][i] += y[i]
			}
		}
	}
	h := refRMSNorm(x[T-1], r.w(tb, "model.norm.weight"), c.RMSNormEps)
	head := r.t["lm_head.weight"]
	if c.TieWordEmbeddings {
		head = emb
	}
	return refLinear(head, h, c.VocabSize, nil)
}

// moe is the transformers sparse block for one token: softmax over all experts, top-k,
// optional renormalisation, weighted sum of the chosen experts, plus the gated shared expert.
func (r *refModel) moe(tb testing.TB, p string, x []float64) []float64 {
	c := r.cfg
	E, K, I, H := c.NumExperts, c.NumExpertsPerTok, c.MoEIntermediateSize, c.HiddenSize
	logit := refLinear(r.w(tb, p+"mlp.gate.weight"), x, E, nil)
	mx := math.Inf(-1)
	for _, v := range logit {
		mx = math.Max(mx, v)
	}
	prob := make([]float64, E)
	sum := 0.0
	for e, v := range logit {
		prob[e] = math.Exp(v - mx)
		sum += prob[e]
	}
	idx := make([]int, E)
	for e := range prob {
		prob[e] /= sum
		idx[e] = e
	}
	sort.SliceStable(idx, func(a, b int) bool { return prob[idx[a]] > prob[idx[b]] })
	top := idx[:K]
	norm := 1.0
	if c.NormTopKProb {
		norm = 0
		for _, e := range top {
			norm += prob[e]
		}
	}
	y := make([]float64, H)
	for _, e := range top {
		var g, u, d []float64
		if gu, ok := r.t[p+"mlp.experts.gate_up_proj"]; ok {
			g = gu[e*2*I*H : e*2*I*H+I*H]
			u = gu[e*2*I*H+I*H : (e+1)*2*I*H]
			d = r.w(tb, p+"mlp.experts.down_proj")[e*H*I : (e+1)*H*I]
		} else {
			ep := p + "mlp.experts." + itoa(e) + "."
			g, u, d = r.w(tb, ep+"gate_proj.weight"), r.w(tb, ep+"up_proj.weight"), r.w(tb, ep+"down_proj.weight")
		}
		o := refMLP(x, g, u, d, I)
		for i := range y {
			y[i] += prob[e] / norm * o[i]
		}
	}
	if c.HasSharedExpert() {
		S := c.SharedExpertIntermediateSize
		s := refMLP(x, r.w(tb, p+"mlp.shared_expert.gate_proj.weight"), r.w(tb, p+"mlp.shared_expert.up_proj.weight"), r.w(tb, p+"mlp.shared_expert.down_proj.weight"), S)
		gl := refLinear(r.w(tb, p+"mlp.shared_expert_gate.weight"), x, 1, nil)[0]
		gate := 1 / (1 + math.Exp(-gl))
		for i := range y {
			y[i] += gate * s[i]
		}
	}
	return y
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b []byte
	for ; i > 0; i /= 10 {
		b = append([]byte{byte('0' + i%10)}, b...)
	}
	return string(b)
}
