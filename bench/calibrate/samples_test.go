package calibrate

import (
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/costmodel"
)

func TestMeasuredShapesKeepsEveryRepetition(t *testing.T) {
	a, b := Shape{QueryWords: 3, Items: 2, ItemTokens: 32}, Shape{QueryWords: 40, Items: 1, ItemTokens: 96}
	samples := []Sample{
		{Shape: a, PrefixTokens: 60, ItemTokens: []int{30, 33}, Seconds: 0.10},
		{Shape: b, PrefixTokens: 150, ItemTokens: []int{97}, Seconds: 0.20},
		{Shape: a, PrefixTokens: 61, ItemTokens: []int{31, 32}, Seconds: 0.12},
		{Shape: a, PrefixTokens: 60, ItemTokens: []int{30, 33}, PrefixCached: true, Seconds: 0.05},
	}
	want := []costmodel.MeasuredShape{
		{PrefixTokens: 60, ItemTokens: []int{30, 33}, Seconds: []float64{0.10, 0.12}},
		{PrefixTokens: 150, ItemTokens: []int{97}, Seconds: []float64{0.20}},
		{PrefixTokens: 60, ItemTokens: []int{30, 33}, PrefixCached: true, Seconds: []float64{0.05}},
	}
	if d := cmp.Diff(want, MeasuredShapes(samples)); d != "" {
		t.Errorf("measured shapes (-want +got):\n%s", d)
	}
}

func TestFromSamplesRoundTrip(t *testing.T) {
	samples := synthetic(costmodel.Coeffs{A: 1e-3, B: 1e-6, C: 0.02}, 0.05, 4)
	base := &costmodel.Profile{Coeffs: costmodel.Coeffs{A: 1, B: 2, C: 3}, Model: "m"}
	p, err := FromSamples(samples, base)
	if err != nil {
		t.Fatal(err)
	}
	if p.Coeffs != base.Coeffs || p.Model != "m" || p.Repetitions() != len(samples) {
		t.Errorf("kept %+v %q, %d repetitions of %d samples", p.Coeffs, p.Model, p.Repetitions(), len(samples))
	}
	path := filepath.Join(t.TempDir(), "p.json")
	if err := p.Save(path); err != nil {
		t.Fatal(err)
	}
	got, err := costmodel.LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if d := cmp.Diff(p, got); d != "" {
		t.Errorf("round trip (-want +got):\n%s", d)
	}
	fitted, err := FromSamples(samples, nil)
	if err != nil {
		t.Fatal(err)
	}
	within(t, "fitted a", fitted.A, 1e-3, 0.1)
}
