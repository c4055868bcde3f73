// Package costmodel is the one formula for the compute cost of scoring a batch, shared by the
// proxy (which learns its coefficients per node), the emulated scorer node (which sleeps for it)
// and calibration (which fits it to a real node).
//
// A batch is one shared prefix of P tokens and items of L_i tokens each. Under causal attention
// with the prefix computed once, item i costs a·L_i (weights: MLP, projections) plus
// b·L_i·(P + L_i/2) (attention: each of its tokens reads the prefix and, on average, half the
// item); the prefix itself costs a·P + b·P²/2 unless it was reused from a cache; a batch adds a
// fixed c (scheduling, head, launch). So
//
//	seconds ≈ a·Tokens + b·Pairs + c·Batches
//
// which is linear in (a, b, c): Features gives that design vector for regression.
//
// All values are plain data and safe to copy; nothing here has state.
package costmodel

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
)

// Coeffs are the cost coefficients of one node.
type Coeffs struct {
	// A is seconds per token (the linear, weight-bound part).
	A float64 `json:"a" yaml:"a"`
	// B is seconds per attended (query token, key token) pair.
	B float64 `json:"b" yaml:"b"`
	// C is seconds per batch (fixed overhead).
	C float64 `json:"c" yaml:"c"`
}

// Validate reports negative or non-finite coefficients.
func (c Coeffs) Validate() error {
	for _, v := range []struct {
		name string
		x    float64
	}{{"a", c.A}, {"b", c.B}, {"c", c.C}} {
		if !(v.x >= 0) || v.x > 1e6 {
			return fmt.Errorf("cost coefficient %s: must be a finite value ≥ 0, got %v", v.name, v.x)
		}
	}
	return nil
}

// Features is the design vector of a batch: seconds ≈ A·Tokens + B·Pairs + C·Batches.
type Features struct {
	Tokens  float64 // tokens computed
	Pairs   float64 // attended (query, key) pairs, halved for the causal part
	Batches float64 // batches (1 for one batch; sums add up)
}

// Add returns f + g (features of batches run together add up).
func (f Features) Add(g Features) Features {
	return Features{f.Tokens + g.Tokens, f.Pairs + g.Pairs, f.Batches + g.Batches}
}

// Sub returns f − g (the work of f without a part g of it).
func (f Features) Sub(g Features) Features {
	return Features{f.Tokens - g.Tokens, f.Pairs - g.Pairs, f.Batches - g.Batches}
}

// Seconds is the predicted time of work with features f.
func (c Coeffs) Seconds(f Features) float64 {
	return c.A*f.Tokens + c.B*f.Pairs + c.C*f.Batches
}

// ItemFeatures is the work of one item of l tokens after a prefix of p tokens.
func ItemFeatures(p, l int) Features {
	L := float64(l)
	return Features{Tokens: L, Pairs: L * (float64(p) + L/2)}
}

// PrefixFeatures is the work of computing a prefix of p tokens.
func PrefixFeatures(p int) Features {
	P := float64(p)
	return Features{Tokens: P, Pairs: P * P / 2}
}

// BatchFeatures is the work of one batch: the prefix (unless reused), every item, and the batch
// overhead.
func BatchFeatures(p int, items []int, prefixCached bool) Features {
	f := Features{Batches: 1}
	if !prefixCached {
		f = f.Add(PrefixFeatures(p))
	}
	for _, l := range items {
		f = f.Add(ItemFeatures(p, l))
	}
	return f
}

// Profile is a node's calibrated cost: what `bench calibrate` writes and the emulated engine
// (`scorer serve --engine emulated --cost-profile FILE`) reads. JSON on disk.
type Profile struct {
	Coeffs
	// NoiseSigma is the σ of a multiplicative log-normal noise on each batch's time (0: none),
	// measured from the residuals of the fit.
	NoiseSigma float64 `json:"noise_sigma"`
	// What was measured: model, preset, machine, threads, when; informational.
	Model      string  `json:"model,omitempty"`
	Machine    string  `json:"machine,omitempty"`
	Threads    int     `json:"threads,omitempty"`
	MeasuredAt string  `json:"measured_at,omitempty"`
	Samples    int     `json:"samples,omitempty"`
	R2         float64 `json:"r2,omitempty"`
	// MaxTokens is the longest prompt the node accepted (0: unlimited).
	MaxTokens int `json:"max_tokens,omitempty"`
	// Measured keeps the measured shapes the coefficients were fitted from, every repetition
	// (see MeasuredShape); empty in a coefficients-only profile.
	Measured []MeasuredShape `json:"measured,omitempty"`
}

// Validate checks the profile's values.
func (p *Profile) Validate() error {
	if err := p.Coeffs.Validate(); err != nil {
		return err
	}
	if p.A == 0 && p.B == 0 && p.C == 0 {
		return errors.New("cost profile: all coefficients are zero")
	}
	if !(p.NoiseSigma >= 0) || p.NoiseSigma > 3 {
		return fmt.Errorf("cost profile: noise_sigma must be in [0, 3], got %v", p.NoiseSigma)
	}
	return p.validateMeasured()
}

// LoadProfile reads and validates a JSON profile.
func LoadProfile(path string) (*Profile, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load cost profile: %w", err)
	}
	var p Profile
	if err := json.Unmarshal(b, &p); err != nil {
		return nil, fmt.Errorf("load cost profile %s: %w", path, err)
	}
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("load cost profile %s: %w", path, err)
	}
	return &p, nil
}

// Save writes the profile as indented JSON.
func (p *Profile) Save(path string) error {
	b, err := json.MarshalIndent(p, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}
