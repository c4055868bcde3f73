package cluster

import (
	"strings"
	"testing"
	"time"
)

// TestConfigRejectsProxyPortZero: the proxy's addresses are polled for readiness and printed in the examples, so port 0 (which
// the nodes accept as "pick a free port") must be refused or resolved, never polled as :0 until
// ready_timeout (5 min by default) runs out.
func TestConfigRejectsProxyPortZero(t *testing.T) {
	for _, addr := range []struct{ http, grpc string }{{"127.0.0.1:0", "127.0.0.1:9090"}, {"127.0.0.1:8080", "127.0.0.1:0"}} {
		c := Config{Proxy: Proxy{HTTPAddr: addr.http, GRPCAddr: addr.grpc}}
		c.Defaults()
		if err := c.Validate(); err == nil {
			t.Errorf("proxy http_addr %s grpc_addr %s: accepted (http :0 is polled for /readyz until ready_timeout; grpc :0 is printed in the examples as is)", addr.http, addr.grpc)
		}
	}
}

// TestExamplesLoadCommandUsesTheClusterSLO: the printed load-test command must judge goodput by the cluster's own budget (make run: 10 s),
// not bench load's 500 ms default, which reports 0 % goodput for a healthy CPU cluster.
func TestExamplesLoadCommandUsesTheClusterSLO(t *testing.T) {
	ex := Examples("127.0.0.1:8080", "127.0.0.1:9090", 10*time.Second, true)
	for _, l := range strings.Split(ex, "\n") {
		if strings.Contains(l, "bench load") && (!strings.Contains(l, "--slo 10s") || !strings.Contains(l, "--emulated")) {
			t.Errorf("printed load command lacks --slo 10s or --emulated (its figures would be unlabelled): %q", strings.TrimSpace(l))
		}
	}
}

// TestConfigRejectsOverlappingNodePorts: node i listens on grpc_base_port+i and
// http_base_port+i, so ranges that overlap give one port to two listeners; the start then fails
// blaming "another cluster still running?" (or a node dies on bind). With make run's config
// (7101 / 7201), `bench cluster --nodes 101` is such a case: node 100's gRPC port is node 0's HTTP
// port. Validate must name it.
func TestConfigRejectsOverlappingNodePorts(t *testing.T) {
	for _, n := range []Nodes{
		{Count: 2, GRPCBasePort: 7101, HTTPBasePort: 7102},
		{Count: 101, GRPCBasePort: 7101, HTTPBasePort: 7201},
		{Count: 2, GRPCBasePort: 8079, HTTPBasePort: 7201}, // node 1's gRPC port is the proxy's HTTP port
	} {
		c := Config{Nodes: n}
		c.Defaults()
		if err := c.Validate(); err == nil {
			t.Errorf("nodes %d, grpc_base_port %d, http_base_port %d (proxy %s, %s): accepted", n.Count, n.GRPCBasePort, n.HTTPBasePort, c.Proxy.HTTPAddr, c.Proxy.GRPCAddr)
		}
	}
	ok := Config{Nodes: Nodes{Count: 100, GRPCBasePort: 7101, HTTPBasePort: 7201}}
	ok.Defaults()
	if err := ok.Validate(); err != nil {
		t.Errorf("100 nodes on 7101 / 7201: %v", err)
	}
}
