package node

import (
	"os"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/internal/yamlconf"
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
	missing, err := yamlconf.Undocumented(b, Config{})
	if err != nil {
		t.Fatal(err)
	}
	for _, key := range missing {
		t.Errorf("configs/scorer.yaml lacks %s", key)
	}
}
