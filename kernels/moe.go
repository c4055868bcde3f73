package kernels

// Expert is one MoE expert's SwiGLU feed-forward: down(silu(gate(x)) · up(x)).
// Gate and Up are [I×H]; Down is [H×I].
type Expert struct {
	Gate, Up, Down *Weight
}

// Routing lists, per expert, the token rows routed to it and their router weights.
// Tokens[e][j] is a row index into the layer input; Weights[e][j] its (possibly renormalised)
// routing weight. Experts that received no token have empty lists.
type Routing struct {
	Tokens  [][]int32
	Weights [][]float32
}

// MoEStats reports what a grouped expert pass did, for metrics and /v1/status.
type MoEStats struct {
	// Variant is the name of the kernel variant used (e.g. "block128", "exact").
	Variant string
	// BlockM is the tile height of the chosen variant (0 for exact-rows).
	BlockM int
	// PaddingRatio is Σ_e ceil(n_e/blockM)·blockM / Σ_e n_e at the chosen blockM (1 for exact-rows
	// up to micro-tile rounding).
	PaddingRatio float64
	// Rows is Σ_e n_e, the routed token-expert pairs.
	Rows int
}

// MoE adds to out ([nTok×H]) the weighted outputs of the experts for the routed tokens of x
// ([nTok×H]): out[t] += Σ_{e: t routed to e} w·expert_e(x[t]). Tokens of one expert are gathered
// and run together. The reference implementation runs one expert at a time through Linear.
func MoE(out, x []float32, hidden int, experts []Expert, r *Routing) MoEStats {
	rows := 0
	for e := range experts {
		toks := r.Tokens[e]
		n := len(toks)
		if n == 0 {
			continue
		}
		rows += n
		ex := &experts[e]
		inter := ex.Gate.N
		xe := make([]float32, n*hidden)
		for j, t := range toks {
			copy(xe[j*hidden:(j+1)*hidden], x[int(t)*hidden:(int(t)+1)*hidden])
		}
		g := make([]float32, n*inter)
		u := make([]float32, n*inter)
		Linear(g, xe, n, ex.Gate)
		Linear(u, xe, n, ex.Up)
		SiLUMul(g, g, u)
		y := make([]float32, n*hidden)
		Linear(y, g, n, ex.Down)
		for j, t := range toks {
			axpy(out[int(t)*hidden:(int(t)+1)*hidden], r.Weights[e][j], y[j*hidden:(j+1)*hidden])
		}
	}
	return MoEStats{Variant: "reference", PaddingRatio: 1, Rows: rows}
}
