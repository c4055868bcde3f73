package kernels

// moeReference is the plain MoE the grouped kernels are tested against: one expert at a time,
// gathered rows through Linear, SiLU·mul, Linear again, then a weighted scatter-add into out in
// expert order. It allocates per expert and uses no padding.
func moeReference(out, x []float32, hidden int, experts []Expert, r *Routing) MoEStats {
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
		siluMulGeneric(g, g, u)
		y := make([]float32, n*hidden)
		Linear(y, g, n, ex.Down)
		for j, t := range toks {
			axpy(out[int(t)*hidden:(int(t)+1)*hidden], r.Weights[e][j], y[j*hidden:(j+1)*hidden])
		}
	}
	return MoEStats{Variant: "reference", PaddingRatio: 1, Rows: rows}
}
