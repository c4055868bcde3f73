package costmodel

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestProfileMeasuredValidation(t *testing.T) {
	base := Profile{Coeffs: Coeffs{A: 1e-3}}
	tests := []struct {
		name string
		m    MeasuredShape
		want string // "" means valid
	}{
		{"ok", MeasuredShape{PrefixTokens: 10, ItemTokens: []int{5}, Seconds: []float64{0.1, 0.2}}, ""},
		{"no items", MeasuredShape{PrefixTokens: 10, Seconds: []float64{0.1}}, "measured[0]: item_tokens"},
		{"zero item", MeasuredShape{ItemTokens: []int{0}, Seconds: []float64{0.1}}, "item_tokens[0]"},
		{"no seconds", MeasuredShape{ItemTokens: []int{3}}, "measured[0]: seconds"},
		{"bad seconds", MeasuredShape{ItemTokens: []int{3}, Seconds: []float64{0.1, -1}}, "seconds[1]"},
		{"negative prefix", MeasuredShape{PrefixTokens: -1, ItemTokens: []int{3}, Seconds: []float64{1}}, "prefix_tokens"},
	}
	for _, tt := range tests {
		p := base
		p.Measured = []MeasuredShape{tt.m}
		err := p.Validate()
		if (err == nil) != (tt.want == "") || (err != nil && !strings.Contains(err.Error(), tt.want)) {
			t.Errorf("%s: Validate() = %v, want %q", tt.name, err, tt.want)
		}
	}
}

func TestLoadProfileWithoutMeasured(t *testing.T) {
	path := filepath.Join(t.TempDir(), "p.json")
	if err := os.WriteFile(path, []byte(`{"a": 0.001, "b": 1e-7, "c": 0.02, "noise_sigma": 0.1}`), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := LoadProfile(path)
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Measured) != 0 || p.Repetitions() != 0 || p.A != 0.001 {
		t.Errorf("loaded %+v", p)
	}
}

func TestMeasuredShapeFeatures(t *testing.T) {
	m := MeasuredShape{PrefixTokens: 10, ItemTokens: []int{4, 6}, Groups: 2}
	one := BatchFeatures(10, []int{4, 6}, false)
	if got, want := m.Features(), one.Add(one); got != want {
		t.Errorf("Features() = %+v, want %+v", got, want)
	}
	if m.MeanItemTokens() != 5 {
		t.Errorf("MeanItemTokens() = %v", m.MeanItemTokens())
	}
}
