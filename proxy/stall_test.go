package proxy

import (
	"context"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/internal/fakenode"
)

// freezer is a TCP relay in front of a node that can stop passing bytes either way, as a
// SIGSTOPped process does: its connections stay open, the kernel accepts what is sent, and
// nothing comes back — neither replies nor health answers.
type freezer struct {
	ln     net.Listener
	target string
	mu     sync.Mutex
	cond   *sync.Cond
	frozen bool
	closed bool
	conns  []net.Conn
	wg     sync.WaitGroup
}

func startFreezer(t *testing.T, target string) *freezer {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &freezer{ln: ln, target: target}
	f.cond = sync.NewCond(&f.mu)
	f.wg.Go(f.accept)
	t.Cleanup(f.close)
	return f
}

func (f *freezer) Addr() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.ln.Addr().String()
}

// Freeze stops (true) or resumes (false) the flow of bytes.
func (f *freezer) Freeze(on bool) {
	f.mu.Lock()
	f.frozen = on
	f.mu.Unlock()
	f.cond.Broadcast()
}

// Restart drops every relayed connection and refuses new ones for down, as a node killed and
// restarted by its supervisor does, then listens again on the same address.
func (f *freezer) Restart(t *testing.T, down time.Duration) {
	t.Helper()
	addr := f.Addr()
	f.ln.Close()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.cond.Broadcast()
	time.Sleep(down)
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listen again on %s: %v", addr, err)
	}
	f.mu.Lock()
	f.ln = ln
	f.mu.Unlock()
	f.wg.Go(f.accept)
}

func (f *freezer) accept() {
	f.mu.Lock()
	ln := f.ln
	f.mu.Unlock()
	for {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", f.target)
		if err != nil {
			c.Close()
			continue
		}
		f.mu.Lock()
		f.conns = append(f.conns, c, u)
		f.mu.Unlock()
		f.wg.Go(func() { f.pipe(u, c) })
		f.wg.Go(func() { f.pipe(c, u) })
	}
}

// pipe copies src to dst, holding what it read while frozen.
func (f *freezer) pipe(dst, src net.Conn) {
	defer dst.Close()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			f.mu.Lock()
			for f.frozen && !f.closed {
				f.cond.Wait()
			}
			f.mu.Unlock()
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				src.Close()
			}
			return
		}
	}
}

func (f *freezer) close() {
	f.mu.Lock()
	f.ln.Close()
	f.closed = true
	for _, c := range f.conns {
		c.Close()
	}
	f.mu.Unlock()
	f.cond.Broadcast()
	f.wg.Wait()
}

// stoppedPair is a proxy over two fast nodes, the second behind a freezer; outlier ejection is
// kept out of the way (slow marks only past the deadline), so stall detection alone acts.
func stoppedPair(t *testing.T, tune func(*Config)) (*Proxy, *freezer, *fakenode.Node, func() float64) {
	t.Helper()
	nodes := startNodes(t, 2, fakenode.Options{Coeffs: fastCost})
	fr := startFreezer(t, nodes[1].Addr())
	cfg := outlierConfig([]string{nodes[0].Addr(), fr.Addr()}, fastCost)
	cfg.SLO = 400 * time.Millisecond
	cfg.Hedge.Enabled = false
	cfg.Outlier.SlowFactor = 100
	cfg.Outlier.SlowMin = time.Second
	tune(&cfg)
	p, reg := startProxy(t, cfg)
	// Registered last, so it runs first: the node answers again before the proxy closes.
	t.Cleanup(func() { fr.Freeze(false) })
	for i := range 20 { // both nodes learn their cost
		score(t, p, makeRequest(8, uint64(i)))
	}
	rescues := func() float64 { return counterValue(t, reg, "relevance_proxy_rescues_total") }
	return p, fr, nodes[1], rescues
}

// TestStoppedNodeIsBypassedUntilItAnswers: a node that stops answering altogether (SIGSTOP: its
// connection up, nothing coming back, health included) looks merely busy to load and outlier
// detection, and least-loaded routing kept feeding it — each request then lost its batch there
// to a rescue timer (one rescue a request; on a loaded cluster, many too late for the deadline).
// Now the first overdue batch checks the node's health, the silent node is marked stalled and
// takes no batches, and it is back as soon as it answers.
func TestStoppedNodeIsBypassedUntilItAnswers(t *testing.T) {
	p, fr, stopped, rescues := stoppedPair(t, func(*Config) {})
	addr := fr.Addr()
	frozen := time.Now()
	fr.Freeze(true)
	before := rescues()
	for i := range 20 {
		start := time.Now()
		if _, err := p.Score(context.Background(), makeRequest(8, uint64(100+i))); err != nil {
			t.Fatalf("request %d with one node stopped: %v (stopped node %s: %+v)", i, err, addr, nodeStatus(t, p, addr))
		}
		if el := time.Since(start); el > 300*time.Millisecond {
			t.Errorf("request %d took %v with one node stopped (deadline 400 ms)", i, el)
		}
	}
	if r := rescues() - before; r > 5 {
		t.Errorf("%v batches rescued from the stopped node in 20 requests: it kept getting batches (want ≤ 5: those sent in the ~50 ms before it was found stalled)", r)
	}
	if s := nodeStatus(t, p, addr); !s.Stalled || s.Stalls != 1 || s.Ejected {
		t.Errorf("stopped node: %+v, want stalled once, not ejected", s)
	} else if s.LastStalledAt.Before(frozen) || s.LastStalledAt.After(time.Now()) {
		t.Errorf("stopped node found stalled at %v, want between the stop (%v) and now", s.LastStalledAt, frozen)
	}

	fr.Freeze(false)
	waitUntil(t, "the stopped node to answer again", func() bool { return !nodeStatus(t, p, addr).Stalled })
	calls := stopped.Calls()
	for i := range 10 {
		score(t, p, makeRequest(8, uint64(200+i)))
	}
	if stopped.Calls() == calls {
		t.Error("the node got no batches after it answered again")
	}
}

// TestBusyNodeIsNotStalled: a node whose batches hang but whose server answers (a long pass, not
// a stopped process) is not marked stalled: its batches are rescued by their timers, as before.
func TestBusyNodeIsNotStalled(t *testing.T) {
	p, hung := stalledPair(t, func(cfg *Config) { cfg.SLO = 400 * time.Millisecond })
	for i := range 5 {
		if _, err := p.Score(context.Background(), makeRequest(8, uint64(i))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if hung.Calls() == 0 {
		t.Fatal("the hung node got no calls: nothing was tested")
	}
	if s := nodeStatus(t, p, hung.Addr()); s.Stalled || s.Stalls != 0 {
		t.Errorf("hung node whose server answers health checks: %+v, want not stalled", s)
	}
}

// TestStallDetectionOff: stall_timeout 0 turns the health checks off; the stopped node is then
// left to the rescue timers (each request rescues its batch there).
func TestStallDetectionOff(t *testing.T) {
	p, fr, _, rescues := stoppedPair(t, func(cfg *Config) { cfg.Outlier.StallTimeout = 0 })
	fr.Freeze(true)
	before := rescues()
	for i := range 10 {
		if _, err := p.Score(context.Background(), makeRequest(8, uint64(100+i))); err != nil {
			t.Fatalf("request %d: %v", i, err)
		}
	}
	if r := rescues() - before; r < 5 {
		t.Errorf("%v rescues in 10 requests with stall detection off: the stopped node was avoided anyway, so the stall test proves nothing", r)
	}
	if s := nodeStatus(t, p, fr.Addr()); s.Stalled || s.Stalls != 0 {
		t.Errorf("stopped node with stall detection off: %+v", s)
	}
}

// TestStalledNodeThatRestartsIsBackInTraffic: a stopped node killed and restarted (its
// connections dropped and refused for a while, then a process behind the address again) is not
// left marked stalled: the proxy keeps asking through the refusals until it answers.
func TestStalledNodeThatRestartsIsBackInTraffic(t *testing.T) {
	p, fr, stopped, _ := stoppedPair(t, func(*Config) {})
	addr := fr.Addr()
	fr.Freeze(true)
	for i := range 5 {
		score(t, p, makeRequest(8, uint64(100+i)))
	}
	if !nodeStatus(t, p, addr).Stalled {
		t.Fatal("the stopped node was not found stalled")
	}
	fr.Freeze(false)
	fr.Restart(t, 300*time.Millisecond) // its checks meet a refused connection meanwhile
	waitUntil(t, "the restarted node to be back", func() bool {
		s := nodeStatus(t, p, addr)
		return !s.Stalled && s.Healthy
	})
	calls := stopped.Calls()
	for i := range 10 {
		score(t, p, makeRequest(8, uint64(200+i)))
	}
	if stopped.Calls() == calls {
		t.Error("the restarted node got no batches")
	}
}
