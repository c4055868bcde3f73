package proxy

import (
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// TestHalfOpenProbeDoesNotBlockFallback: when every node's breaker refuses (open, or half-open
// with its probe already out), requests still go to the least recently failed node instead of
// failing UNAVAILABLE until the probe returns.
func TestHalfOpenProbeDoesNotBlockFallback(t *testing.T) {
	nodes := startNodes(t, 2, fakenode.Options{})
	cfg := testConfig(nodes.Addrs())
	cfg.Breaker.ConsecutiveFailures = 1
	cfg.Breaker.OpenTimeout = 20 * time.Millisecond
	p, _ := startProxy(t, cfg)
	var probes []func(error)
	for _, n := range p.cluster.Snapshot() {
		done, err := n.Breaker().Allow()
		if err != nil {
			t.Fatal(err)
		}
		done(status.Error(codes.Unavailable, "trip")) // open
	}
	waitUntil(t, "breakers half-open", func() bool {
		for _, s := range p.Nodes() {
			if s.Breaker != "half-open" {
				return false
			}
		}
		return true
	})
	for _, n := range p.cluster.Snapshot() {
		done, err := n.Breaker().Allow() // the probe, held out
		if err != nil {
			t.Fatal(err)
		}
		probes = append(probes, done)
	}
	defer func() {
		for _, done := range probes {
			done(nil)
		}
	}()
	score(t, p, makeRequest(4, 1))
}
