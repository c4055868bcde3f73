package serve

import (
	"strings"
	"testing"
)

// TestScorerBackendModelIsRefusedNotIgnored: a nodes.backends entry's model keeps a vLLM (or
// multi-model Infinity) node out of traffic until its server lists that model. On a
// kind: scorer entry nothing reads it — the cluster takes only max_items and timeout from a
// scorer entry, and a scorer node answers with whatever checkpoint it loaded — so an operator of a
// mixed cluster who writes model on every entry believes the scorer nodes are checked too. As
// max_item_tokens on a scorer entry is, it must be refused, naming the key.
func TestScorerBackendModelIsRefusedNotIgnored(t *testing.T) {
	cfg, err := Parse([]byte("proxy:\n  nodes:\n    backends:\n      - {kind: scorer, addr: \"127.0.0.1:7101\", model: Qwen/Qwen3-Reranker-0.6B}\n"))
	if err != nil {
		t.Fatal(err)
	}
	err = cfg.Validate()
	if err == nil {
		t.Fatal("a scorer backend's model was accepted, and is never read")
	}
	if !strings.Contains(err.Error(), "proxy.nodes.backends") || !strings.Contains(err.Error(), "model") {
		t.Errorf("error does not name the key: %v", err)
	}
}

// TestScorerBackendAddrWithoutPortIsRefused: the same scorer node in nodes.static must be
// host:port, but a kind: scorer backends entry took any string as a gRPC target, and gRPC reads a
// bare host as dns:///host:443 — a node written without its port (or with a port out of range)
// validated, then stayed unhealthy for ever, dialled on a port nothing listens on. Targets with a
// scheme (dns:///, unix:) stay accepted as they are.
func TestScorerBackendAddrWithoutPortIsRefused(t *testing.T) {
	parse := func(addr string) error {
		cfg, err := Parse([]byte("proxy:\n  nodes:\n    backends:\n      - {kind: scorer, addr: \"" + addr + "\"}\n"))
		if err != nil {
			t.Fatal(err)
		}
		return cfg.Validate()
	}
	for _, addr := range []string{"cpu-1", "127.0.0.1", "cpu-1:70000", ":7101"} {
		err := parse(addr)
		if err == nil {
			t.Errorf("scorer backend addr %q accepted", addr)
		} else if !strings.Contains(err.Error(), "addr") {
			t.Errorf("addr %q: error does not name the key: %v", addr, err)
		}
	}
	for _, addr := range []string{"cpu-1:7101", "[::1]:7101", "dns:///scorer.ns.svc:7101", "unix:/tmp/scorer.sock"} {
		if err := parse(addr); err != nil {
			t.Errorf("scorer backend addr %q refused: %v", addr, err)
		}
	}
}
