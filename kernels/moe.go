package kernels

import (
	"fmt"
	"sync/atomic"
)

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
	// Policy is the policy that chose the variant ("threshold", "auto", "fixed:64", …).
	Policy string
}

// defaultRunner serves MoE; SetMoEPolicy swaps it atomically so calls in flight finish with the
// runner they started with. Nil until first used: a threshold runner is installed then.
var defaultRunner atomic.Pointer[MoERunner]

// SetMoEPolicy sets the policy of the package-level MoE. The new runner starts without cost
// tables: under PolicyAuto the first call for each layer shape measures one (about a second), so
// a node should call MoERunner.Calibrate at start-up or hold its own runner.
func SetMoEPolicy(p MoEPolicy) { defaultRunner.Store(NewMoERunner(p)) }

// DefaultMoERunner returns the runner the package-level MoE uses (PolicyThreshold unless
// SetMoEPolicy chose another).
func DefaultMoERunner() *MoERunner {
	if r := defaultRunner.Load(); r != nil {
		return r
	}
	defaultRunner.CompareAndSwap(nil, NewMoERunner(MoEPolicy{Kind: PolicyThreshold}))
	return defaultRunner.Load()
}

// MoE adds to out ([nTok×H]) the weighted outputs of the experts for the routed tokens of x
// ([nTok×H]): out[t] += Σ_{e: t routed to e} w·expert_e(x[t]), summed in expert order. It runs the
// grouped expert GEMM with the package policy (threshold unless SetMoEPolicy changed it).
// Malformed input (routing that does not match experts or x) is a programming error here and
// panics with the reason; MoERunner.Run returns it as an error instead.
func MoE(out, x []float32, hidden int, experts []Expert, r *Routing) MoEStats {
	st, err := DefaultMoERunner().Run(out, x, hidden, experts, r)
	if err != nil {
		panic(fmt.Sprintf("kernels: MoE: %v", err))
	}
	return st
}
