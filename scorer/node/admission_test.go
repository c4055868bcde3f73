package node

import (
	"context"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// TestQueueFullRefusesBeforeTokenizing: an overloaded node turns a call away without spending
// CPU on tokenizing it.
func TestQueueFullRefusesBeforeTokenizing(t *testing.T) {
	f := newFake()
	pe := &panicEngine{fakeEngine: f}
	cfg := testConfig()
	cfg.MaxQueueBatches = 1
	f.release = make(chan struct{})
	h := start(t, cfg, loadEngine(pe), true)
	first := goCall(ctxT(t), h, batch("first", "doc"))
	<-f.started
	queued := goCall(ctxT(t), h, batch("q1", "doc"))
	waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == 1 })
	before := pe.tokenizeCalls.Load()
	if _, err := h.client.ScoreBatch(ctxT(t), batch("q2", "doc")); status.Code(err) != codes.ResourceExhausted {
		t.Errorf("err = %v, want ResourceExhausted", err)
	}
	if n := pe.tokenizeCalls.Load() - before; n != 0 {
		t.Errorf("tokenized %d batches that the full queue turned away", n)
	}
	close(f.release)
	for _, c := range []<-chan callResult{first, queued} {
		if r := <-c; r.err != nil {
			t.Error(r.err)
		}
	}
}

// TestDrainWaitsForCallsBeingTokenized: a call accepted before the drain began is in-flight
// work: it finishes with its scores, and Shutdown waits for it; calls arriving after are refused.
func TestDrainWaitsForCallsBeingTokenized(t *testing.T) {
	f := newFake()
	f.started = nil
	pe := &panicEngine{fakeEngine: f, tokEntered: make(chan struct{}, 1), tokGate: make(chan struct{})}
	h := start(t, testConfig(), loadEngine(pe), true)
	call := goCall(ctxT(t), h, batch("q", "doc"))
	<-pe.tokEntered
	shut := make(chan error, 1)
	go func() { shut <- h.n.Shutdown(ctxT(t)) }()
	waitSched(t, h.n.sched, "draining", func(loadSnapshot) bool {
		h.n.sched.mu.Lock()
		defer h.n.sched.mu.Unlock()
		return h.n.sched.closed
	})
	if h.n.Ready() {
		t.Error("Ready during drain")
	}
	if _, err := h.client.ScoreBatch(ctxT(t), batch("late", "doc")); status.Code(err) != codes.Unavailable {
		t.Errorf("call after the drain began: err = %v, want Unavailable", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) while an accepted call was tokenizing", err)
	default:
	}
	close(pe.tokGate)
	if r := <-call; r.err != nil || len(r.resp.Scores) != 1 {
		t.Errorf("call accepted before the drain: %v", r.err)
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

// TestGoneCallerIsNotTokenized: a call whose caller has already gone costs no tokenizing.
func TestGoneCallerIsNotTokenized(t *testing.T) {
	f := newFake()
	f.started = nil
	pe := &panicEngine{fakeEngine: f}
	h := start(t, testConfig(), loadEngine(pe), true)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := (&service{n: h.n}).ScoreBatch(ctx, batch("q", "doc"))
	if status.Code(err) != codes.Canceled {
		t.Errorf("err = %v, want Canceled", err)
	}
	if n := pe.tokenizeCalls.Load(); n != 0 {
		t.Errorf("tokenized %d batches for a caller that had gone", n)
	}
}
