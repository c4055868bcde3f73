package node

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
)

// TestMergeKeepsEarlierDeadlines: merging a queued batch into the head's pass must not make the
// head miss a deadline it meets alone.
func TestMergeKeepsEarlierDeadlines(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration // head's deadline from now; 0: none
		want     []int         // groups per pass
	}{
		{"no deadline merges", 0, []int{2}},
		{"loose deadline merges", 3 * time.Hour, []int{2}},
		{"merge would miss the head's deadline", 90 * time.Minute, []int{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.started = nil
			f.secPerToken = 600 // each batch below is 6 tokens: an hour alone, two merged
			s := newScheduler(1000, 10)
			t0 := time.Now()
			s.now = func() time.Time { return t0 }
			ctxA, cancel := context.WithCancel(context.Background())
			if tc.deadline > 0 {
				ctxA, cancel = context.WithDeadline(context.Background(), t0.Add(tc.deadline))
			}
			defer cancel()
			var jobs []*job
			for i, ctx := range []context.Context{ctxA, context.Background()} {
				g, err := f.Tokenize("", string(rune('a'+i)), []string{"dd"}, scorer.TokenizeOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.admit(); err != nil {
					t.Fatal(err)
				}
				j, err := s.submit(ctx, f, g)
				if err != nil {
					t.Fatal(err)
				}
				jobs = append(jobs, j)
			}
			s.start(f)
			defer s.stop()
			for i, j := range jobs {
				if r := <-j.done; r.err != nil {
					t.Errorf("job %d: %v", i, r.err)
				}
			}
			if diff := cmp.Diff(tc.want, f.passCounts()); diff != "" {
				t.Errorf("groups per pass (-want +got):\n%s", diff)
			}
		})
	}
}

// panicEngine panics in Forward or Tokenize while the flags are set.
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

// rawCodec sends pre-encoded bytes so that invalid UTF-8 reaches the wire (protobuf-go's
// Marshal refuses to write it).
type rawCodec struct{}

func (rawCodec) Marshal(v any) ([]byte, error)   { return v.([]byte), nil }
func (rawCodec) Unmarshal(b []byte, v any) error { return proto.Unmarshal(b, v.(proto.Message)) }
func (rawCodec) Name() string                    { return "proto" }

var _ encoding.Codec = rawCodec{}

// TestInvalidUTF8OverTheWire: invalid UTF-8 sent by a client is INVALID_ARGUMENT naming the
// field, is counted in the request metrics, and never reaches the engine.
func TestInvalidUTF8OverTheWire(t *testing.T) {
	f := newFake()
	f.started = nil
	pe := &panicEngine{fakeEngine: f}
	h := start(t, testConfig(), loadEngine(pe), true)
	item := func(text string) []byte {
		b := protowire.AppendTag(nil, 2, protowire.BytesType)
		return protowire.AppendString(b, text)
	}
	msg := func(query, instruction string, items ...[]byte) []byte {
		b := protowire.AppendTag(nil, 3, protowire.BytesType)
		b = protowire.AppendString(b, query)
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendString(b, instruction)
		for _, it := range items {
			b = protowire.AppendTag(b, 5, protowire.BytesType)
			b = protowire.AppendBytes(b, it)
		}
		return b
	}
	tests := []struct {
		name string
		req  []byte
		want string // "" means OK
	}{
		{"valid", msg("shoes", "", item("red shoes")), ""},
		{"query", msg("sho\xffes", "", item("x")), "query: invalid UTF-8"},
		{"instruction", msg("q", "judge\xc3", item("x")), "instruction: invalid UTF-8"},
		{"second item", msg("q", "", item("fine"), item("b\xed\xa0\x80d")), "items[1].text: invalid UTF-8"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			before := pe.tokenizeCalls.Load()
			out := new(pb.ScoreBatchResponse)
			err := h.conn.Invoke(ctxT(t), pb.Scorer_ScoreBatch_FullMethodName, tc.req, out, grpc.ForceCodec(rawCodec{}))
			if tc.want == "" {
				if err != nil || len(out.Scores) != 1 {
					t.Fatalf("valid request: %v (%d scores)", err, len(out.Scores))
				}
				return
			}
			if status.Code(err) != codes.InvalidArgument || status.Convert(err).Message() != tc.want {
				t.Errorf("err = %v, want InvalidArgument %q", err, tc.want)
			}
			if pe.tokenizeCalls.Load() != before {
				t.Error("a request with invalid UTF-8 reached the engine")
			}
		})
	}
	if got := testutil.ToFloat64(h.n.m.requests.WithLabelValues("InvalidArgument")); got != 3 {
		t.Errorf("requests_total{code=InvalidArgument} = %v, want 3", got)
	}
	if got := testutil.ToFloat64(h.n.m.errors.WithLabelValues(reasonInvalid)); got != 3 {
		t.Errorf("errors_total{reason=invalid_argument} = %v, want 3", got)
	}
}

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

// TestQueueKeepsNoFinishedJobs: the queue's backing array holds no references to jobs that left
// it (each holds a batch's tokens and its caller's context).
func TestQueueKeepsNoFinishedJobs(t *testing.T) {
	f := newFake()
	f.started = nil
	s := newScheduler(1000, 10)
	var jobs []*job
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		g, _ := f.Tokenize("", string(rune('a'+i)), []string{"doc"}, scorer.TokenizeOptions{})
		if err := s.admit(); err != nil {
			t.Fatal(err)
		}
		c := context.Background()
		if i == 1 {
			c = ctx
		}
		j, err := s.submit(c, f, g)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	s.remove(jobs[1]) // a caller that left while queued
	s.start(f)
	defer s.stop()
	for i, j := range jobs {
		if i == 1 {
			continue
		}
		if r := <-j.done; r.err != nil {
			t.Fatal(r.err)
		}
	}
	waitSched(t, s, "idle", func(l loadSnapshot) bool { return l.InflightBatches == 0 })
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.queue[:cap(s.queue)] {
		if q != nil {
			t.Errorf("queue backing array slot %d still holds a job", i)
		}
	}
}
