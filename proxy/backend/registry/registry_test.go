package registry_test

import (
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/registry"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func TestEveryKindBuilds(t *testing.T) {
	for _, kind := range backend.Kinds() {
		b, err := registry.New(backend.Spec{Kind: kind, Addr: "127.0.0.1:1"})
		if err != nil {
			t.Errorf("New(%s): %v", kind, err)
			continue
		}
		if _, isLoader := b.(backend.Loader); isLoader == (kind == backend.KindScorer) {
			t.Errorf("%s: implements Loader = %v", kind, isLoader)
		}
		if err := b.Close(); err != nil {
			t.Errorf("%s: Close: %v", kind, err)
		}
	}
}

func TestNewAllNamesTheNode(t *testing.T) {
	specs := []backend.Spec{
		{Kind: "tei", Addr: "127.0.0.1:8081"},
		{Kind: "scorer", Addr: "127.0.0.1:9000"},
		{Kind: "foo", Addr: "127.0.0.1:8082"},
	}
	const want = `nodes[2].kind: must be one of infinity, llamacpp, scorer, sglang, tei, vllm, got "foo"`
	if _, err := registry.NewAll(specs); err == nil || err.Error() != want {
		t.Errorf("NewAll error = %v, want %q", err, want)
	}
	if err := registry.Validate(specs); err == nil || err.Error() != want {
		t.Errorf("Validate error = %v, want %q", err, want)
	}
	bs, err := registry.NewAll(specs[:2])
	if err != nil || len(bs) != 2 {
		t.Fatalf("NewAll(valid) = %v, %v", bs, err)
	}
	for _, b := range bs {
		_ = b.Close()
	}
}

func TestKindRules(t *testing.T) {
	for _, tc := range []struct {
		spec backend.Spec
		want string
	}{
		{backend.Spec{Kind: "llamacpp", Addr: "h:1", Template: "proxy"}, `nodes[0].template: llamacpp supports only "server"`},
		{backend.Spec{Kind: "scorer", Addr: "h:1", Template: "proxy"}, `nodes[0].template: scorer nodes build the prompt themselves`},
		{backend.Spec{Kind: "scorer", Addr: "h:1", MaxItemTokens: 512}, `nodes[0].max_item_tokens: scorer nodes report their own prompt limit`},
		{backend.Spec{Kind: "vllm", Addr: "h:1", MaxItems: -2}, `nodes[0].max_items: must be >= 0`},
	} {
		err := registry.Validate([]backend.Spec{tc.spec})
		if err == nil || !strings.HasPrefix(err.Error(), tc.want) {
			t.Errorf("Validate(%+v) = %v, want prefix %q", tc.spec, err, tc.want)
		}
	}
}
