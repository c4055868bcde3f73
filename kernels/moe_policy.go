package kernels

import (
	"fmt"
	"math"
	"strings"
)

// MoEVariant is one kernel variant of the grouped expert GEMM.
//
// The block variants lay each expert's rows out in a segment padded to a multiple of BlockM and
// compute whole BlockM-row tiles, padding rows included, as GPU grouped-GEMM kernels do. The
// exact variant packs the segments without padding and computes each expert's real rows in work
// items of up to exactItemRows rows; the GEMM kernel rounds only the last micro-tile up. The
// variants differ in speed only: a token's output has the same bits under every one (the GEMM
// sums each row alone, the combine adds a token's experts in expert order), so a policy may pick
// by cost without moving scores.
type MoEVariant uint8

const (
	VariantBlock128 MoEVariant = iota
	VariantBlock64
	VariantBlock32
	VariantBlock16
	VariantExact
	numMoEVariants
)

// numBlockVariants counts the block variants, which come first in the enumeration.
const numBlockVariants = int(VariantExact)

// MoEVariants lists every variant, block variants from the tallest tile down, exact last.
func MoEVariants() []MoEVariant {
	return []MoEVariant{VariantBlock128, VariantBlock64, VariantBlock32, VariantBlock16, VariantExact}
}

// BlockM is the tile height of a block variant, 0 for exact.
func (v MoEVariant) BlockM() int {
	switch v {
	case VariantBlock128:
		return 128
	case VariantBlock64:
		return 64
	case VariantBlock32:
		return 32
	case VariantBlock16:
		return 16
	}
	return 0
}

// String names the variant; the names are constants so that reporting one in MoEStats on every
// call allocates nothing.
func (v MoEVariant) String() string {
	switch v {
	case VariantBlock128:
		return "block128"
	case VariantBlock64:
		return "block64"
	case VariantBlock32:
		return "block32"
	case VariantBlock16:
		return "block16"
	case VariantExact:
		return "exact"
	}
	return fmt.Sprintf("variant(%d)", uint8(v))
}

// ParseMoEVariant reads "128", "block128", …, "16", "block16" or "exact".
func ParseMoEVariant(s string) (MoEVariant, error) {
	t := strings.TrimPrefix(strings.ToLower(strings.TrimSpace(s)), "block")
	for _, v := range MoEVariants() {
		if t == v.String() || (v.BlockM() > 0 && t == fmt.Sprint(v.BlockM())) {
			return v, nil
		}
	}
	return 0, fmt.Errorf("unknown MoE variant %q (want 128, 64, 32, 16 or exact)", s)
}

// MoEPolicyKind says how a policy picks the variant for one call.
type MoEPolicyKind uint8

const (
	// PolicyThreshold is the reference behaviour: blockM 128, switching to 64 when the padding
	// ratio at 128 exceeds ThresholdRatio.
	PolicyThreshold MoEPolicyKind = iota
	// PolicyAuto predicts each variant's time from a measured cost table and picks the least.
	PolicyAuto
	// PolicyFixed always runs MoEPolicy.Variant.
	PolicyFixed
)

// ThresholdRatio is the padding ratio at blockM 128 above which PolicyThreshold drops to 64.
const ThresholdRatio = 1.5

// MoEPolicy selects the grouped-GEMM variant for each call. The zero value is PolicyThreshold.
type MoEPolicy struct {
	Kind MoEPolicyKind
	// Variant is the variant of PolicyFixed; ignored otherwise.
	Variant MoEVariant
}

func (p MoEPolicy) String() string {
	switch p.Kind {
	case PolicyThreshold:
		return "threshold"
	case PolicyAuto:
		return "auto"
	case PolicyFixed:
		switch p.Variant {
		case VariantBlock128:
			return "fixed:128"
		case VariantBlock64:
			return "fixed:64"
		case VariantBlock32:
			return "fixed:32"
		case VariantBlock16:
			return "fixed:16"
		case VariantExact:
			return "fixed:exact"
		}
		return "fixed:" + p.Variant.String()
	}
	return fmt.Sprintf("policy(%d)", uint8(p.Kind))
}

// ParseMoEPolicy reads a policy as written in configuration: "threshold", "auto", or
// "fixed:<variant>" with the variant one of 128, 64, 32, 16, exact (or block128 …).
func ParseMoEPolicy(s string) (MoEPolicy, error) {
	t := strings.ToLower(strings.TrimSpace(s))
	switch {
	case t == "threshold":
		return MoEPolicy{Kind: PolicyThreshold}, nil
	case t == "auto":
		return MoEPolicy{Kind: PolicyAuto}, nil
	case strings.HasPrefix(t, "fixed:"):
		v, err := ParseMoEVariant(strings.TrimPrefix(t, "fixed:"))
		if err != nil {
			return MoEPolicy{}, fmt.Errorf("moe policy %q: %w", s, err)
		}
		return MoEPolicy{Kind: PolicyFixed, Variant: v}, nil
	}
	return MoEPolicy{}, fmt.Errorf("unknown moe policy %q (want threshold, auto or fixed:<128|64|32|16|exact>)", s)
}

// PaddingRatio is Σ_e ceil(n_e/blockM)·blockM / Σ_e n_e: the rows a whole-tile kernel computes
// per useful row. It is 1 when there are no rows or blockM ≤ 1.
func PaddingRatio(counts []int, blockM int) float64 {
	useful, padded := 0, 0
	for _, n := range counts {
		useful += n
		padded += roundUp(n, max(blockM, 1))
	}
	if useful == 0 {
		return 1
	}
	return float64(padded) / float64(useful)
}

func roundUp(n, m int) int { return (n + m - 1) / m * m }

// chooseThreshold is the reference policy.
func chooseThreshold(counts []int) MoEVariant {
	if PaddingRatio(counts, 128) > ThresholdRatio {
		return VariantBlock64
	}
	return VariantBlock128
}

// MoECostTable is the cost model of PolicyAuto, measured on this machine for one layer shape
// (hidden, expert width, weight type) on the threads the grouped GEMM uses. Units are seconds
// of one thread's CPU time.
type MoECostTable struct {
	// TileSeconds[v] is the time of one whole tile of block variant v: gate and up over BlockM
	// rows, SiLU·mul, down.
	TileSeconds [numBlockVariants]float64
	// The exact variant's work item of n rows costs ItemSeconds + n′·RowSeconds, n′ being n
	// rounded up to RowGranule (16 where the products run on AMX tiles, else 1): ItemSeconds
	// is mostly streaming the expert's weights, RowSeconds the arithmetic of one row.
	ItemSeconds, RowSeconds float64
	RowGranule              int
	// ItemRows is the exact variant's work-item height (exactItemRows); 0 means exactChunkRows.
	ItemRows int
}

// Validate reports whether c can be a measured table: every tile time positive and finite, the
// exact variant's item and row times finite, not negative and not both zero (the fit clamps
// either at zero), the granule and item height not negative. A table read back from a file may
// be anything.
func (c MoECostTable) Validate() error {
	finite := func(x float64) bool { return x >= 0 && !math.IsInf(x, 0) }
	for v, t := range c.TileSeconds {
		if !(t > 0) || !finite(t) {
			return fmt.Errorf("moe cost table: tile of variant %s takes %g s", MoEVariant(v), t)
		}
	}
	if !finite(c.ItemSeconds) || !finite(c.RowSeconds) || !(c.ItemSeconds+c.RowSeconds > 0) {
		return fmt.Errorf("moe cost table: item %g s, row %g s", c.ItemSeconds, c.RowSeconds)
	}
	if c.RowGranule < 0 || c.ItemRows < 0 {
		return fmt.Errorf("moe cost table: row granule %d, item rows %d", c.RowGranule, c.ItemRows)
	}
	return nil
}

func (c *MoECostTable) itemRows() int {
	if c.ItemRows > 0 {
		return c.ItemRows
	}
	return exactChunkRows
}

// Predict is the modelled time of running variant v over experts with counts routed rows each:
// Σ tiles × cost per tile, or for exact Σ items × ItemSeconds + rows × RowSeconds.
func (c *MoECostTable) Predict(v MoEVariant, counts []int) float64 {
	if v == VariantExact {
		h := c.itemRows()
		var t float64
		for _, n := range counts {
			if n > 0 {
				t += float64((n+h-1)/h)*c.ItemSeconds + float64(c.granuleRows(n))*c.RowSeconds
			}
		}
		return t
	}
	b := v.BlockM()
	tiles := 0
	for _, n := range counts {
		tiles += (n + b - 1) / b
	}
	return float64(tiles) * c.TileSeconds[v]
}

// granuleRows is the rows n costs in the exact variant: each item of ≤ ItemRows rows rounded
// up to RowGranule.
func (c *MoECostTable) granuleRows(n int) int {
	g := max(c.RowGranule, 1)
	if g == 1 {
		return n
	}
	h := c.itemRows()
	full, rest := n/h, n%h
	return full*roundUp(h, g) + roundUp(rest, g)
}

// Cheapest returns the variant with the least predicted time (the earlier one on a tie).
func (c *MoECostTable) Cheapest(counts []int) MoEVariant {
	best, bestT := VariantExact, c.Predict(VariantExact, counts)
	for v := MoEVariant(0); int(v) < numBlockVariants; v++ {
		if t := c.Predict(v, counts); t < bestT {
			best, bestT = v, t
		}
	}
	return best
}
