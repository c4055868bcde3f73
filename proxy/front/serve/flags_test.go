package serve

import (
	"flag"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
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
