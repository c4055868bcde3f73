package node

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"

	"google.golang.org/grpc/codes"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/scorer"
)

// panicEngine wraps fakeEngine: it panics in Forward or Tokenize while the flags are set, and
// counts and can hold Tokenize calls (admission_test.go and wire_validation_test.go use that).
type panicEngine struct {
	*fakeEngine
	forward, tokenize atomic.Bool
	tokenizeCalls     atomic.Int32
	tokEntered        chan struct{} // nil, or told when a Tokenize starts (buffered)
	tokGate           chan struct{} // nil, or Tokenize waits until it is closed
	holdPanic         chan struct{} // nil, or a panicking Forward waits until it is closed
}

func (p *panicEngine) Tokenize(instruction, query string, docs []string, opt scorer.TokenizeOptions) (*scorer.Group, error) {
	p.tokenizeCalls.Add(1)
	if p.tokGate != nil {
		p.tokEntered <- struct{}{}
		<-p.tokGate
	}
	if p.tokenize.Load() {
		panic("tokenizer bug")
	}
	return p.fakeEngine.Tokenize(instruction, query, docs, opt)
}

func (p *panicEngine) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	if p.forward.Load() {
		if p.started != nil {
			p.started <- groups
		}
		if p.holdPanic != nil {
			<-p.holdPanic
		}
		panic("kernel bug")
	}
	return p.fakeEngine.Forward(ctx, groups)
}

// TestTokenizePanicIsInternal: a panic in a call's tokenizing fails that call with INTERNAL;
// the tokenizer holds no state a panic could corrupt, so the node stays in service.
func TestTokenizePanicIsInternal(t *testing.T) {
	f := newFake()
	f.started = nil
	pe := &panicEngine{fakeEngine: f}
	h := start(t, testConfig(), loadEngine(pe), true)
	pe.tokenize.Store(true)
	_, err := h.client.ScoreBatch(ctxT(t), batch("q", "doc"))
	pe.tokenize.Store(false)
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "internal error: tokenizer bug") {
		t.Errorf("err = %v, want Internal naming the panic", err)
	}
	if _, err := h.client.ScoreBatch(ctxT(t), batch("q", "doc")); err != nil {
		t.Errorf("the call after the panic: %v", err)
	}
	if l := h.n.sched.load(); l.InflightBatches != 0 || l.QueuedBatches != 0 {
		t.Errorf("load after the panic = %+v", l)
	}
	checkHealth(t, h, healthpb.HealthCheckResponse_SERVING)
}

// TestForwardPanicTakesNodeOutOfService: a panic in Forward fails that pass's callers with
// INTERNAL, not the process; since the engine's state (its prefix cache) can no longer be
// trusted, queued and later calls get UNAVAILABLE and every probe turns false.
func TestForwardPanicTakesNodeOutOfService(t *testing.T) {
	f := newFake()
	pe := &panicEngine{fakeEngine: f, holdPanic: make(chan struct{})}
	pe.forward.Store(true)
	h := start(t, testConfig(), loadEngine(pe), true)
	first := goCall(ctxT(t), h, batch("first", "doc"))
	<-f.started
	queued := goCall(ctxT(t), h, batch("queued", "doc"))
	waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == 1 })
	close(pe.holdPanic)
	if r := <-first; status.Code(r.err) != codes.Internal || !strings.Contains(r.err.Error(), "engine panicked: kernel bug") {
		t.Errorf("call in the pass: err = %v, want Internal naming the panic", r.err)
	}
	if r := <-queued; status.Code(r.err) != codes.Unavailable {
		t.Errorf("queued call: err = %v, want Unavailable", r.err)
	}
	if _, err := h.client.ScoreBatch(ctxT(t), batch("later", "doc")); status.Code(err) != codes.Unavailable || !strings.Contains(err.Error(), "out of service") {
		t.Errorf("later call: err = %v, want Unavailable (out of service)", err)
	}
	checkHealth(t, h, healthpb.HealthCheckResponse_NOT_SERVING)
	for _, path := range []string{"/readyz", "/healthz"} {
		if code, body := get(t, h, path); code != 503 || !strings.Contains(body, "engine failed") {
			t.Errorf("%s = %d %q, want 503 naming the failure", path, code, body)
		}
	}
	if st := h.n.Status(); st.Ready || !strings.Contains(st.EngineError, "kernel bug") {
		t.Errorf("status ready=%v engine_error=%q", st.Ready, st.EngineError)
	}
	if n := len(f.passCounts()); n != 0 {
		t.Errorf("%d passes ran after the panic", n)
	}
	select {
	case <-h.n.Broken():
		if err := h.n.BrokenErr(); err == nil || !strings.Contains(err.Error(), "kernel bug") {
			t.Errorf("BrokenErr = %v", err)
		}
	default:
		t.Error("Broken not closed")
	}
}
