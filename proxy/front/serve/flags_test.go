package serve

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/proxy"
)

func TestFlags(t *testing.T) {
	file := filepath.Join(t.TempDir(), "proxy.yaml")
	if err := os.WriteFile(file, []byte("http: {addr: 0.0.0.0:80}\nproxy: {nodes: {static: [a:1]}, hedge: {enabled: true}, split: {max_batch_items: 8}}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		edit func(*Config)
	}{
		{name: "no flags: defaults", args: nil},
		{name: "file only", args: []string{"--config", file}, edit: func(c *Config) {
			c.HTTP.Addr, c.Proxy.Nodes.Static, c.Proxy.Hedge.Enabled, c.Proxy.Split.MaxBatchItems = "0.0.0.0:80", []string{"a:1"}, true, 8
		}},
		{name: "every flag overrides the file", args: []string{"--config", file,
			"--http-addr", "127.0.0.1:0", "--grpc-addr", "127.0.0.1:1", "--nodes", "n1:9000, n2:9000,", "--dns", "scorer.default.svc:9000",
			"--split", "fixed", "--route", "random", "--hedge=false", "--slo", "250ms", "--token-counter", "exact",
			"--max-batch-items", "16", "--log-level", "debug"},
			edit: func(c *Config) {
				c.HTTP.Addr, c.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:1"
				c.Proxy.Nodes.Static, c.Proxy.Nodes.DNS = []string{"n1:9000", "n2:9000"}, "scorer.default.svc:9000"
				c.Proxy.Split.Strategy, c.Proxy.Route.Strategy, c.Proxy.Hedge.Enabled = "fixed", "random", false
				c.Proxy.SLO, c.Proxy.Cost.TokenCounter, c.Proxy.Split.MaxBatchItems = 250*time.Millisecond, "exact", 16
				c.LogLevel = "debug"
			}},
		{name: "unset flags keep file values", args: []string{"--config", file, "--route", "round_robin"}, edit: func(c *Config) {
			c.HTTP.Addr, c.Proxy.Nodes.Static, c.Proxy.Hedge.Enabled, c.Proxy.Split.MaxBatchItems = "0.0.0.0:80", []string{"a:1"}, true, 8
			c.Proxy.Route.Strategy = "round_robin"
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			f := RegisterFlags(fs)
			if err := fs.Parse(tc.args); err != nil {
				t.Fatal(err)
			}
			got, err := f.Load()
			if err != nil {
				t.Fatal(err)
			}
			want := DefaultConfig()
			if tc.edit != nil {
				tc.edit(&want)
			}
			if d := cmp.Diff(want, got); d != "" {
				t.Errorf("config (-want +got):\n%s", d)
			}
		})
	}
}

func TestFlagsBadConfigFile(t *testing.T) {
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	f := RegisterFlags(fs)
	if err := fs.Parse([]string{"--config", "missing.yaml"}); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Load(); err == nil {
		t.Error("Load with a missing --config file succeeded")
	}
}

// TestStrategiesFromTheRegistry: every strategy in proxy's registration list is accepted by
// Validate and named in the flag help, and an unknown name's error lists every registered one,
// so that adding a strategy takes one edit.
func TestStrategiesFromTheRegistry(t *testing.T) {
	tests := []struct {
		name, flag, field string
		registered        []string
		set               func(*Config, string)
	}{
		{"split", "split", "proxy.split.strategy", proxy.SplitStrategies(), func(c *Config, s string) { c.Proxy.Split.Strategy = s }},
		{"route", "route", "proxy.route.strategy", proxy.RouteStrategies(), func(c *Config, s string) { c.Proxy.Route.Strategy = s }},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			if len(tc.registered) < 2 || !slices.IsSorted(tc.registered) {
				t.Fatalf("registered strategies = %q, want two or more, sorted", tc.registered)
			}
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			RegisterFlags(fs)
			help := fs.Lookup(tc.flag).Usage
			def := DefaultConfig()
			def.Proxy.Nodes.Static = []string{"127.0.0.1:7000"}
			for _, name := range tc.registered {
				if !strings.Contains(help, name) {
					t.Errorf("--%s help %q does not name %q", tc.flag, help, name)
				}
				c := def
				tc.set(&c, name)
				if err := c.Validate(); err != nil {
					t.Errorf("Validate with %s %q: %v", tc.field, name, err)
				}
			}
			c := def
			tc.set(&c, "x")
			want := tc.field + ": must be one of " + strings.Join(tc.registered, ", ") + `, got "x"`
			if err := c.Validate(); err == nil || err.Error() != want {
				t.Errorf("Validate with an unknown strategy: %v, want %s", err, want)
			}
		})
	}
}
