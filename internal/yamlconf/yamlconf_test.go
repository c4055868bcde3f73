package yamlconf

import (
	"errors"
	"strings"
	"testing"
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
