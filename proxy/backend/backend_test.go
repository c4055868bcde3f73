package backend_test

import (
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/proxy/backend"
)

func TestSpecValidate(t *testing.T) {
	for _, tc := range []struct {
		name string
		spec backend.Spec
		want string
	}{
		{"tei host:port", backend.Spec{Kind: "tei", Addr: "127.0.0.1:8081"}, ""},
		{"vllm URL with prefix", backend.Spec{Kind: "vllm", Addr: "https://gpu-3:8000/v1/", Template: "server", MaxItems: 64, Timeout: time.Second}, ""},
		{"scorer target", backend.Spec{Kind: "scorer", Addr: "dns:///scorer:9000"}, ""},
		{"unknown kind", backend.Spec{Kind: "foo", Addr: "h:1"}, `kind: must be one of infinity, llamacpp, scorer, sglang, tei, vllm, got "foo"`},
		{"no kind", backend.Spec{Addr: "h:1"}, `kind: must be one of infinity, llamacpp, scorer, sglang, tei, vllm, got ""`},
		{"no addr", backend.Spec{Kind: "tei"}, "addr: must not be empty"},
		{"bad scheme", backend.Spec{Kind: "tei", Addr: "ftp://h:1"}, `addr: must be host:port or an http(s) base URL, got "ftp://h:1"`},
		{"query in URL", backend.Spec{Kind: "tei", Addr: "http://h:1/?x=1"}, `addr: must be host:port or an http(s) base URL, got "http://h:1/?x=1"`},
		{"bad template", backend.Spec{Kind: "tei", Addr: "h:1", Template: "jinja"}, `template: must be "proxy", "server" or empty (the kind's default), got "jinja"`},
		{"negative max_items", backend.Spec{Kind: "tei", Addr: "h:1", MaxItems: -1}, "max_items: must be >= 0 (0: the kind's default), got -1"},
		{"negative max_item_tokens", backend.Spec{Kind: "tei", Addr: "h:1", MaxItemTokens: -5}, "max_item_tokens: must be >= 0 (0: the kind's default), got -5"},
		{"negative timeout", backend.Spec{Kind: "tei", Addr: "h:1", Timeout: -time.Second}, "timeout: must be >= 0 (0: 30s), got -1s"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.spec.Validate()
			if got := ""; err != nil {
				got = err.Error()
				if got != tc.want {
					t.Errorf("Validate() = %q, want %q", got, tc.want)
				}
			} else if tc.want != "" {
				t.Errorf("Validate() = nil, want %q", tc.want)
			}
		})
	}
}

// TestSpecNode: a node's name is its kind and address, with a URL's path prefix, so that two
// servers behind one gateway (gw:8080/gpu-1, gw:8080/gpu-2) are two nodes, not one.
func TestSpecNode(t *testing.T) {
	for spec, want := range map[backend.Spec]string{
		{Kind: "tei", Addr: "127.0.0.1:8081"}:          "tei@127.0.0.1:8081",
		{Kind: "vllm", Addr: "https://gpu-3:8000/v1"}:  "vllm@gpu-3:8000/v1",
		{Kind: "vllm", Addr: "http://gw:8080/gpu-1/"}:  "vllm@gw:8080/gpu-1",
		{Kind: "vllm", Addr: "http://gw:8080/gpu-2"}:   "vllm@gw:8080/gpu-2",
		{Kind: "scorer", Addr: "dns:///scorer-0:9000"}: "scorer@dns:///scorer-0:9000",
	} {
		if got := spec.Node(); got != want {
			t.Errorf("%+v.Node() = %q, want %q", spec, got, want)
		}
	}
}

func TestSpecDefaults(t *testing.T) {
	s := backend.Spec{MaxItemTokens: 100}
	if got := s.LimitsOr(backend.Limits{MaxItems: 32, MaxItemTokens: 512}); got != (backend.Limits{MaxItems: 32, MaxItemTokens: 100}) {
		t.Errorf("LimitsOr = %+v", got)
	}
	if s.TemplateOr(backend.TemplateProxy) != backend.TemplateProxy || s.TimeoutOr() != backend.DefaultTimeout {
		t.Error("zero fields do not take the defaults")
	}
}
