package serve

import (
	"os"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/internal/yamlconf"
)

const exampleConfig = "../../../configs/proxy.yaml"

// TestExampleConfigIsTheDefaults: configs/proxy.yaml shows every default, so parsing it must give
// DefaultConfig with only its example nodes added, and it must validate.
func TestExampleConfigIsTheDefaults(t *testing.T) {
	got, err := Load(exampleConfig)
	if err != nil {
		t.Fatal(err)
	}
	want := DefaultConfig()
	want.Proxy.Nodes.Static = []string{"127.0.0.1:7101", "127.0.0.1:7102"}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("configs/proxy.yaml differs from the defaults (-want +got):\n%s", d)
	}
	if err := got.Validate(); err != nil {
		t.Errorf("configs/proxy.yaml does not validate: %v", err)
	}
}

// TestExampleConfigDocumentsEveryField walks Config's yaml tags and checks that each key path is
// present in configs/proxy.yaml, so a field added to any section cannot go undocumented.
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
		t.Errorf("configs/proxy.yaml lacks %s", key)
	}
}

func TestParse(t *testing.T) {
	tests := []struct {
		name    string
		yaml    string
		edit    func(*Config)
		wantErr string // substring of Parse's error, or of Validate's when Parse succeeds
	}{
		{name: "empty file is the defaults", yaml: "", wantErr: "proxy.nodes: need nodes.static, nodes.dns or nodes.backends (or --nodes host:port,...)"},
		{name: "overrides", yaml: "http: {addr: 0.0.0.0:80, read_timeout: 2s}\nproxy: {nodes: {dns: scorer.ns.svc:9000}, slo: 250ms, split: {strategy: fixed}}\nlog_level: debug\n",
			edit: func(c *Config) {
				c.HTTP.Addr, c.HTTP.ReadTimeout = "0.0.0.0:80", 2*time.Second
				c.Proxy.Nodes.DNS, c.Proxy.SLO, c.Proxy.Split.Strategy = "scorer.ns.svc:9000", 250*time.Millisecond, "fixed"
				c.LogLevel = "debug"
			}},
		{name: "unknown key", yaml: "http: {adr: x}\n", wantErr: "field adr not found"},
		{name: "unknown core key", yaml: "proxy: {split: {stratgy: fixed}}\n", wantErr: "field stratgy not found"},
		{name: "bad value type", yaml: "http: {max_body_bytes: lots}\n", wantErr: "cannot unmarshal !!str `lots`"},
		{name: "bad http field", yaml: "proxy: {nodes: {static: [a:1]}}\nhttp: {max_body_bytes: -5}\n", wantErr: "http.max_body_bytes: must be > 0, got -5"},
		{name: "bad core field", yaml: "proxy: {nodes: {static: [a:1]}, route: {strategy: fastest}}\n", wantErr: `proxy.route.strategy: must be`},
		{name: "bad log level", yaml: "proxy: {nodes: {static: [a:1]}}\nlog_level: loud\n", wantErr: `log_level: must be debug, info, warn or error, got "loud"`},
		{name: "bad log format", yaml: "proxy: {nodes: {static: [a:1]}}\nlog_format: xml\n", wantErr: `log_format: must be text or json, got "xml"`},
		{name: "bad shutdown", yaml: "proxy: {nodes: {static: [a:1]}}\nshutdown: {timeout: 0s}\n", wantErr: "shutdown.timeout: must be > 0, got 0s"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Parse([]byte(tc.yaml))
			if err == nil {
				err = got.Validate()
			}
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error = %v, want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultConfig()
			tc.edit(&want)
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}

func TestLoadMissingFile(t *testing.T) {
	if _, err := Load("does-not-exist.yaml"); err == nil || !strings.Contains(err.Error(), "load config") {
		t.Errorf("Load(missing) = %v", err)
	}
}
