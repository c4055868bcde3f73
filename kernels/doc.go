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
// Weight values are immutable once built and safe for concurrent use by any number of goroutines.
// The functions write only to the dst/out slices they are given; calls on disjoint outputs may
// run concurrently.
package kernels
