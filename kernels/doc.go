// Package kernels holds the numeric kernels of the scorer's forward pass: dense and grouped (MoE
// expert) matrix products over f32 or bf16 weights, attention over a shared prefix, RMSNorm, RoPE,
// SiLU·mul and softmax.
//
// The API in this package is the seam between the model code (package scorer) and the
// implementations: the model calls these functions only, so faster implementations (Go assembly
// with CPU-feature dispatch, see the *_amd64 files) swap in without touching the model. Every
// accelerated path has a pure-Go reference beside it (the *_generic.go files, built always) that
// tests compare against; `-tags purego` builds the package with the references alone.
//
// Every kernel computes a row of its output the same way, bit for bit, whatever else is in the
// call: how many rows there are, where the row sits among them (which micro-tile height, which
// AMX tile, which attention row block), how the work is split across threads and, for the MoE,
// which variant runs. Reductions (over K in a product, over keys in attention, over experts in
// the MoE combine) have one order per row: K is never split across threads or cut by anything
// but the fixed cache blocks, every micro-kernel height sums in k order in one chain, and a
// weight type takes one path for every row count. The scorer relies on it for one score per
// (model, prompt) whatever batch or cached prefix computed it (issue 14); invariance_test.go
// pins it with == on every implementation the machine runs.
//
// Weight values are immutable once built and safe for concurrent use by any number of goroutines.
// The functions write only to the dst/out slices they are given; calls on disjoint outputs may
// run concurrently.
package kernels
