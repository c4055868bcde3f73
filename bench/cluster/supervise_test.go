package cluster

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestSuperviseReturnsWhenTheProxyDies: the package doc says "the proxy dying ends it": Supervise
// must return the proxy's exit (with its last lines) while the nodes keep running, not wait for
// its node watchers, which only end when the context does.
func TestSuperviseReturnsWhenTheProxyDies(t *testing.T) {
	cfg := testConfig(t)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, _ := startOneNode(ctx, t, cfg)
	if err := c.StartProxy(ctx, cfg.Proxy, "proxy"); err != nil {
		t.Fatal(err)
	}
	c.mu.Lock()
	proxyPid := c.proxy.Pid()
	c.mu.Unlock()
	done := make(chan error, 1)
	go func() { done <- c.Supervise(ctx) }() // ctx stays live: only the proxy's exit may end it
	time.Sleep(50 * time.Millisecond)
	if err := syscall.Kill(proxyPid, syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "proxy exited") {
			t.Errorf("Supervise: %v, want the proxy's exit", err)
		}
	case <-time.After(5 * time.Second):
		cancel() // unblock it for the cleanup
		<-done
		t.Fatal("Supervise still running 5 s after the proxy died (it returned only when the context ended)")
	}
}

// TestFailedRestartKeepsTheDeadNodesLog: when a restart fails (here the binary is gone), the
// dead node's log, kept as node-i.log.1, must not be overwritten by the empty log of the failed
// attempt at the next try.
func TestFailedRestartKeepsTheDeadNodesLog(t *testing.T) {
	cfg := testConfig(t)
	d := RestartDelay
	t.Cleanup(func() { RestartDelay = d }) // after the cluster's Stop (cleanups run last first)
	RestartDelay = 10 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	c, log := startOneNode(ctx, t, cfg)
	sctx, stopSupervising := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- c.Supervise(sctx) }()
	if err := os.Remove(filepath.Join(cfg.BinDir, "scorer")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(c.Nodes()[0].Pid(), syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	// Two failed restarts: 10 ms, then 20 ms later.
	for strings.Count(log.String(), "cluster: restart node-0:") < 2 {
		select {
		case <-ctx.Done():
			t.Fatalf("no two failed restarts; log:\n%s", log.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	stopSupervising()
	<-done
	b, err := os.ReadFile(filepath.Join(cfg.LogDir, "node-0.log.1"))
	if err != nil || !strings.Contains(string(b), "scorer starting serve") {
		t.Errorf("node-0.log.1 = %q, %v: want the dead node's own log (its start line)", b, err)
	}
}

// startOneNode starts a cluster of cfg with one node (stopped when the test ends) and returns it
// with the log it writes.
func startOneNode(ctx context.Context, t *testing.T, cfg Config) (*Cluster, *syncBuffer) {
	t.Helper()
	cfg.Nodes.Count = 1
	log := new(syncBuffer)
	c, err := New(cfg, log)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Stop() })
	if err := c.StartNodes(ctx); err != nil {
		t.Fatal(err)
	}
	return c, log
}
