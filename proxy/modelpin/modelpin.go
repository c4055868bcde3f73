// Package modelpin carries in a context the model that one client request is served by, when a
// front answers it with several core calls (vLLM's score API: one per distinct text_1). Each core
// call picks its model from the cluster on its own; during a rolling update the cluster's model
// can change between them, and one reply would hold scores of two models. The front puts one Pin
// in the context of all of a request's calls; the core pins it to the fingerprint the first call
// is served by and holds the later calls to it.
//
// It imports nothing of the proxy, so that the fronts and the core both can.
package modelpin

import (
	"context"
	"sync"
)

// Pin is the model fingerprint the core calls of one client request are served by. The zero
// value pins nothing yet; a nil *Pin pins nothing ever. Safe for concurrent use.
type Pin struct {
	mu sync.Mutex
	fp string
}

// Hold pins fp unless a fingerprint is pinned already, and returns the pinned one: fp when it
// took, the earlier one when not, "" when fp is "" and nothing is pinned. A nil Pin returns fp.
func (p *Pin) Hold(fp string) string {
	if p == nil {
		return fp
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.fp == "" {
		p.fp = fp
	}
	return p.fp
}

type ctxKey struct{}

// NewContext is ctx carrying p: the core calls made under it share p.
func NewContext(ctx context.Context, p *Pin) context.Context {
	return context.WithValue(ctx, ctxKey{}, p)
}

// FromContext is the Pin ctx carries (nil when none).
func FromContext(ctx context.Context) *Pin {
	p, _ := ctx.Value(ctxKey{}).(*Pin)
	return p
}
