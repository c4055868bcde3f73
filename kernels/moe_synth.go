package kernels

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// SyntheticRouting draws a seeded routing of nTok tokens, each sent to topK distinct experts of
// nExperts, for benchmarks and tests. Expert popularity follows a Zipf law of exponent zipfS over
// a seeded random ranking of the experts (zipfS 0: uniform, "balanced"); a token picks its experts
// by popularity without replacement. Each token's weights are positive and sum to 1, like
// renormalised top-k router probabilities. Token lists are in ascending token order.
func SyntheticRouting(nTok, nExperts, topK int, zipfS float64, seed uint64) (*Routing, error) {
	if nTok < 0 || nExperts <= 0 || topK <= 0 || topK > nExperts {
		return nil, fmt.Errorf("synthetic routing: need nTok ≥ 0 and 0 < topK ≤ nExperts, got nTok %d, topK %d, nExperts %d", nTok, topK, nExperts)
	}
	if zipfS < 0 || math.IsNaN(zipfS) {
		return nil, fmt.Errorf("synthetic routing: zipf exponent must be ≥ 0, got %v", zipfS)
	}
	rng := rand.New(rand.NewPCG(seed, 0x5eed))
	rank := rng.Perm(nExperts)
	pop := make([]float64, nExperts)
	var sum float64
	for e := range pop {
		pop[e] = math.Pow(float64(rank[e]+1), -zipfS)
		sum += pop[e]
	}
	r := &Routing{Tokens: make([][]int32, nExperts), Weights: make([][]float32, nExperts)}
	picked := make([]int, 0, topK)
	w := make([]float32, topK)
	for t := range nTok {
		picked = picked[:0]
		left := sum
		for len(picked) < topK {
			// Draw by popularity among the experts not yet picked.
			x := rng.Float64() * left
			e := 0
			for ; e < nExperts; e++ {
				if contains(picked, e) {
					continue
				}
				if x < pop[e] {
					break
				}
				x -= pop[e]
			}
			if e == nExperts { // rounding at the end of the range: take the last free expert
				for e = nExperts - 1; contains(picked, e); e-- {
				}
			}
			picked = append(picked, e)
			left -= pop[e]
		}
		var ws float32
		for i := range w {
			w[i] = 0.05 + rng.Float32()
			ws += w[i]
		}
		for i, e := range picked {
			r.Tokens[e] = append(r.Tokens[e], int32(t))
			r.Weights[e] = append(r.Weights[e], w[i]/ws)
		}
	}
	return r, nil
}

func contains(s []int, v int) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// RoutingCounts returns the number of rows routed to each expert.
func RoutingCounts(r *Routing) []int {
	c := make([]int, len(r.Tokens))
	for e, t := range r.Tokens {
		c[e] = len(t)
	}
	return c
}
