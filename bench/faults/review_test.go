package faults

import (
	"context"
	"errors"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/load"
)

// deadlineTarget reports the time left to the deadline of each call it gets, then answers at
// once (or, with block, when the call's context ends).
type deadlineTarget struct {
	load.Target
	left  chan time.Duration
	block bool
}

func (d deadlineTarget) Do(ctx context.Context, _ load.Prepared) error {
	left := time.Duration(-1)
	if dl, ok := ctx.Deadline(); ok {
		left = time.Until(dl)
	}
	d.left <- left
	if d.block {
		<-ctx.Done()
		return ctx.Err()
	}
	return nil
}

// TestCallBudgetCountsFromTheActualSend: the scenarios judge a call's latency from its actual
// send (call's doc: the load generator on this shared machine is sometimes late, and a scenario
// judges the cluster, not the client's scheduling). The deadline a gRPC call carries to the proxy
// (the SLO, as a search backend would set it) must then count from the same moment; load.Run
// sets it from the schedule's intended send time, so a call the generator sent 480 ms late
// reached the proxy with 20 ms of a 500 ms budget: refused, or failed, for the client's delay.
func TestCallBudgetCountsFromTheActualSend(t *testing.T) {
	rec := &recorder{}
	defer rec.close()
	fake := deadlineTarget{left: make(chan time.Duration, 1)}
	rt := &recTarget{Target: fake, r: rec, budget: 500 * time.Millisecond}
	// What load.Run passes for a request due 480 ms ago with a 500 ms timeout.
	ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(20*time.Millisecond))
	defer cancel()
	if err := rt.Do(ctx, load.Prepared{}); err != nil {
		t.Fatal(err)
	}
	if left := <-fake.left; left < 400*time.Millisecond || left > 500*time.Millisecond {
		t.Errorf("the call reached the server with %v to its deadline, want the 500 ms budget from its send", left)
	}

	// The load's own end (stopLoad in sigterm-proxy, the suite's Ctrl-C) still ends the call.
	fake = deadlineTarget{left: make(chan time.Duration, 1), block: true}
	rt = &recTarget{Target: fake, r: rec, budget: 5 * time.Second}
	lctx, stop := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- rt.Do(lctx, load.Prepared{}) }()
	<-fake.left
	stop()
	select {
	case err := <-done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("a call whose load was stopped ended with %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("a call whose load was stopped did not end")
	}
}

// TestMemoryBoundCountsTheCacheAlreadyHeld: the goal bounds a node's RSS by model + prefix-cache
// budget + margin. The scenario measures growth from its first sample, taken after the earlier
// scenarios: a real node whose cache is already full there has its budget inside that sample, so
// only the margin is left for growth. Allowing the whole budget again passed a node that held a
// full 256 MiB cache and then grew by 300 MiB more (RSS model + 556 MiB, against model + 320).
func TestMemoryBoundCountsTheCacheAlreadyHeld(t *testing.T) {
	const margin, budget = 64 << 20, 256 << 20
	if got := nodeGrowthBound(false, margin, budget, budget); got != margin {
		t.Errorf("real node with a full cache at the first sample: growth bound %.0f MiB, want the margin, %.0f MiB", mb(got), mb(margin))
	}
	if got := nodeGrowthBound(false, margin, budget, 0); got != margin+budget {
		t.Errorf("real node with an empty cache at the first sample: growth bound %.0f MiB, want budget + margin, %.0f MiB", mb(got), mb(margin+budget))
	}
	if got := nodeGrowthBound(true, margin, budget, budget); got != margin {
		t.Errorf("emulated node: growth bound %.0f MiB, want the margin (it holds no KV)", mb(got))
	}
	// The node judged is the one furthest beyond its own bound, not the one that grew most: a
	// restarted node filling its empty cache (+250 MiB, within 320) beside one that held a full
	// cache and grew by 100 MiB (bound 64).
	var fresh, warm rssSeries
	fresh.add(1, 400<<20)
	fresh.add(1, 650<<20)
	warm.add(2, 700<<20)
	warm.add(2, 800<<20)
	bounds := []int64{nodeGrowthBound(false, margin, budget, 0), nodeGrowthBound(false, margin, budget, budget)}
	if w := worstNodeGrowth([]rssSeries{fresh, warm}, bounds); w != 1 {
		t.Errorf("judged node %d, want 1 (the warm node, 36 MiB beyond its bound)", w)
	}
}

// TestProxyThatIgnoresSIGTERMIsNotLeftRunning: sigterm-proxy restarts the proxy after its
// SIGTERM. A proxy that did not exit (the very failure the scenario looks for) was left running:
// e.proxy then names the new one, so nothing ever stopped the old one, which kept the ports the
// new proxy needs (every later scenario failed on "restart proxy") until the suite exited.
func TestProxyThatIgnoresSIGTERMIsNotLeftRunning(t *testing.T) {
	p, err := cluster.StartProc("proxy", "/bin/sh", []string{"-c", "trap '' TERM; while :; do sleep 0.05; done"}, filepath.Join(t.TempDir(), "proxy.log"))
	if err != nil {
		t.Fatal(err)
	}
	defer p.Stop(0)
	time.Sleep(100 * time.Millisecond) // the trap is set
	_ = syscall.Kill(p.Pid(), syscall.SIGTERM)
	if tExit := proxyExit(p, 200*time.Millisecond, 200*time.Millisecond); !tExit.IsZero() {
		t.Errorf("a proxy that ignores SIGTERM exited at %v", tExit)
	}
	if alive(p.Pid()) {
		t.Errorf("pid %d (a proxy that ignored SIGTERM) still runs after the scenario gave up on it", p.Pid())
	}
}
