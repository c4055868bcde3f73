package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/scorer/node"
)

func TestServeConfig(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "scorer.yaml")
	if err := os.WriteFile(file, []byte("engine: emulated\ncost_profile: p.json\nnode_id: from-file\nthreads: 3\ndrain_timeout: 5s\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	withFile := func(mod func(*node.Config)) node.Config {
		c := node.Default()
		c.Engine, c.CostProfile, c.NodeID, c.Threads, c.DrainTimeout = "emulated", "p.json", "from-file", 3, 5*time.Second
		mod(&c)
		return c
	}
	tests := []struct {
		name    string
		args    []string
		want    node.Config
		wantErr string
	}{
		{
			name: "file only",
			args: []string{"--config", file},
			want: withFile(func(*node.Config) {}),
		},
		{
			name: "flags override the file",
			args: []string{"--config", file, "--node-id", "n7", "--grpc-addr", "127.0.0.1:9001", "--http-addr", "127.0.0.1:9002",
				"--max-tokens", "512", "--prefix-cache-bytes", "0", "--moe-policy", "fixed:64", "--threads", "1"},
			want: withFile(func(c *node.Config) {
				c.NodeID, c.GRPCAddr, c.HTTPAddr, c.MaxTokens, c.PrefixCacheBytes, c.MoEPolicy, c.Threads = "n7", "127.0.0.1:9001", "127.0.0.1:9002", 512, 0, "fixed:64", 1
			}),
		},
		{
			name: "no file: defaults plus flags",
			args: []string{"--engine", "real", "--model", "models/small"},
			want: func() node.Config { c := node.Default(); c.Model = "models/small"; return c }(),
		},
		{name: "invalid after flags", args: []string{"--config", file, "--engine", "gpu"}, wantErr: "engine: must be"},
		{name: "real without model", args: nil, wantErr: "model: required"},
		{name: "missing file", args: []string{"--config", filepath.Join(dir, "nope.yaml")}, wantErr: "load config"},
		{name: "stray argument", args: []string{"--model", "m", "extra"}, wantErr: "unexpected arguments"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := serveConfig(tt.args)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("config (-want +got):\n%s", diff)
			}
		})
	}
}
