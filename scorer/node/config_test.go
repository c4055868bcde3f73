package node

import (
	"os"
	"reflect"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

const exampleConfig = "../../configs/scorer.yaml"

// TestExampleConfigIsTheDefaults: configs/scorer.yaml shows every default, so loading it must
// give Default with only its model (the one make run generates) set, and it must validate.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	got, err := Load(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	want := Default()
	want.Model = "models/small-qwen3_moe-seed1"
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("configs/scorer.yaml differs from the defaults (-want +got):\n%s", d)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("configs/scorer.yaml does not validate: %v", err)
	}
}

// TestExampleConfigDocumentsEveryField: every key of Config is in configs/scorer.yaml, set or
// (for one whose default is "none", like cost) shown in a comment, so that a field added cannot
// go undocumented.
func TestExampleConfigDocumentsEveryField(t *testing.T) {
	b, err := os.ReadFile(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	var doc map[string]any
	if err := yaml.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	typ := reflect.TypeOf(Config{})
	for i := range typ.NumField() {
		key, _, _ := strings.Cut(typ.Field(i).Tag.Get("yaml"), ",")
		if key == "" || key == "-" {
			continue
		}
		if _, ok := doc[key]; ok {
			continue
		}
		if regexp.MustCompile(`(?m)^# ` + regexp.QuoteMeta(key) + `:`).Match(b) {
			continue
		}
		t.Errorf("configs/scorer.yaml lacks %s", key)
	}
}
