package yamlconf

import (
	"errors"
	"strings"
	"testing"
	"time"
)

type conf struct {
	Name  string `yaml:"name"`
	Count int    `yaml:"count"`
}

// TestDecodeIsStrict: values over defaults; unknown keys and a second document are errors; an
// empty file is no error.
func TestDecodeIsStrict(t *testing.T) {
	c := conf{Name: "default", Count: 3}
	if err := Decode([]byte("count: 5\n"), &c); err != nil || c != (conf{"default", 5}) {
		t.Errorf("decode over defaults: %+v, %v", c, err)
	}
	if err := Decode(nil, &c); err != nil || c != (conf{"default", 5}) {
		t.Errorf("empty input: %+v, %v", c, err)
	}
	if err := Decode([]byte("cuont: 5\n"), &c); err == nil || !strings.Contains(err.Error(), "cuont") {
		t.Errorf("misspelt key: %v, want an error naming it", err)
	}
	if err := Decode([]byte("count: 1\n---\ncount: -1\nbogus: 2\n"), &c); !errors.Is(err, ErrSecondDocument) {
		t.Errorf("second document: %v, want ErrSecondDocument", err)
	}
	if err := Decode([]byte("count: 1\n---\n"), &c); err != nil {
		t.Errorf("a trailing empty document: %v", err)
	}
}

// TestDecodeRefusesFractionsForWholeNumbers: yaml.v3 cuts 32.9 to 32 in an int field; Decode
// refuses it, naming the key path and the value written. Floats stay floats, durations strings.
func TestDecodeRefusesFractionsForWholeNumbers(t *testing.T) {
	type inner struct {
		Items []int         `yaml:"items"`
		Ratio float64       `yaml:"ratio"`
		Wait  time.Duration `yaml:"wait"`
		Limit uint32
	}
	type outer struct {
		Split inner            `yaml:"split"`
		Sizes map[string]int64 `yaml:"sizes"`
		Ptr   *inner           `yaml:"ptr"`
	}
	for body, want := range map[string]string{
		"split: {items: [1, 2.5]}\n":  "split.items[1]: want a whole number, got 2.5",
		"sizes: {a: 0.9}\n":           "sizes.a: want a whole number, got 0.9",
		"ptr: {limit: 1e-3}\n":        "ptr.limit: want a whole number ≥ 0, got 1e-3",
		"split: {ratio: 0.5}\n":       "",
		"split: {wait: 1.5s}\n":       "",
		"split: {items: [1, 2, 3]}\n": "",
	} {
		var o outer
		err := Decode([]byte(body), &o)
		if want == "" {
			if err != nil {
				t.Errorf("%q: %v", body, err)
			}
			continue
		}
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%q: %v, want %q", body, err, want)
		}
	}
}
