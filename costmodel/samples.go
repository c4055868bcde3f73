package costmodel

import (
	"fmt"
	"math"
)

// MeasuredShape is one batch shape measured on a real node, with the time of every repetition:
// what a samples profile (Profile.Measured) keeps so that an emulated node can replay the
// measured times and their spread instead of the fitted formula.
//
// A profile without measured shapes (older files, or hand-written coefficients) is still valid:
// the field is optional in JSON and the emulated engine then falls back to the formula.
type MeasuredShape struct {
	// PrefixTokens is the shared prefix's length in tokens (computed, or reused when PrefixCached).
	PrefixTokens int `json:"prefix_tokens"`
	// ItemTokens is each item's length in tokens (of the first repetition; repetitions of one
	// designed shape differ by a few tokens at most).
	ItemTokens []int `json:"item_tokens"`
	// PrefixCached is set when the prefix came from the node's prefix cache (not computed).
	PrefixCached bool `json:"prefix_cached,omitempty"`
	// Groups is how many batches were merged into the measured pass (0 means 1: a single batch);
	// each group has this shape.
	Groups int `json:"groups,omitempty"`
	// Concurrent is how many passes ran beside it on the node when measured (0: none, the
	// calibration default of one batch at a time). Informational.
	Concurrent int `json:"concurrent,omitempty"`
	// Seconds holds every repetition's time, in measurement order (all > 0).
	Seconds []float64 `json:"seconds"`
}

// NumGroups is Groups with 0 read as 1.
func (m MeasuredShape) NumGroups() int { return max(1, m.Groups) }

// Features is the work of the measured pass in the formula's terms: NumGroups batches of this
// shape, the prefix counted once per group unless cached (calibration makes every query unique).
func (m MeasuredShape) Features() Features {
	f := BatchFeatures(m.PrefixTokens, m.ItemTokens, m.PrefixCached)
	return Features{f.Tokens * float64(m.NumGroups()), f.Pairs * float64(m.NumGroups()), f.Batches * float64(m.NumGroups())}
}

// MeanItemTokens is the mean of ItemTokens (0 when there are none).
func (m MeasuredShape) MeanItemTokens() float64 {
	if len(m.ItemTokens) == 0 {
		return 0
	}
	s := 0
	for _, l := range m.ItemTokens {
		s += l
	}
	return float64(s) / float64(len(m.ItemTokens))
}

// Validate reports a shape that cannot be replayed.
func (m MeasuredShape) Validate() error {
	if m.PrefixTokens < 0 {
		return fmt.Errorf("prefix_tokens: must be ≥ 0, got %d", m.PrefixTokens)
	}
	if len(m.ItemTokens) == 0 {
		return fmt.Errorf("item_tokens: must not be empty")
	}
	for i, l := range m.ItemTokens {
		if l <= 0 {
			return fmt.Errorf("item_tokens[%d]: must be > 0, got %d", i, l)
		}
	}
	if m.Groups < 0 || m.Concurrent < 0 {
		return fmt.Errorf("groups, concurrent: must be ≥ 0, got %d, %d", m.Groups, m.Concurrent)
	}
	if len(m.Seconds) == 0 {
		return fmt.Errorf("seconds: must hold at least one repetition")
	}
	for i, s := range m.Seconds {
		if !(s > 0) || math.IsInf(s, 0) {
			return fmt.Errorf("seconds[%d]: must be a finite value > 0, got %v", i, s)
		}
	}
	return nil
}

// validateMeasured checks every measured shape of p.
func (p *Profile) validateMeasured() error {
	for i, m := range p.Measured {
		if err := m.Validate(); err != nil {
			return fmt.Errorf("cost profile: measured[%d]: %w", i, err)
		}
	}
	return nil
}

// Repetitions is the number of measured passes in p.Measured (Σ len(Seconds)).
func (p *Profile) Repetitions() int {
	n := 0
	for _, m := range p.Measured {
		n += len(m.Seconds)
	}
	return n
}
