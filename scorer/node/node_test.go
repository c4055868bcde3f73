package node

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"math"
	"net/http"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/emulated"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// fakeEngine is a controllable scorer.Engine: prompts are one token per rune, the logit of an
// item is 0.01 × its document's length, and Forward can be held (release) or fail (err).
type fakeEngine struct {
	maxTokens   int
	secPerToken float64
	// passCost is the default prior's fixed cost of a batch (c): what a merged pass saves, so
	// that queued batches merge (mergePays).
	passCost float64
	release  chan struct{}        // nil: Forward returns at once; else waits for a receive or close
	started  chan []*scorer.Group // receives every pass's groups (buffered); nil: not sent
	err      error
	// prior overrides CostPrior; truth, when set, is the fake's real speed: Forward reports the
	// pass's features and truth's time for them (times noise, when set) without sleeping.
	prior scorer.CostPrior
	truth costmodel.Coeffs
	noise func() float64

	mu        sync.Mutex
	passes    []int // groups per pass
	cancelled int   // passes ended by ctx
}

func newFake() *fakeEngine {
	return &fakeEngine{maxTokens: 512, secPerToken: 1e-6, passCost: 1e-3, started: make(chan []*scorer.Group, 64)}
}

var _ scorer.Engine = (*fakeEngine)(nil)

var tail = []int32{-1, -2}

func runes(s string) []int32 {
	var out []int32
	for _, r := range s {
		out = append(out, r)
	}
	return out
}

func (f *fakeEngine) Tokenize(instruction, query string, docs []string, opt scorer.TokenizeOptions) (*scorer.Group, error) {
	g := &scorer.Group{
		Prefix:    runes(instruction + "|" + query),
		Items:     make([][]int32, len(docs)),
		Truncated: make([]int, len(docs)),
		TooLong:   make([]bool, len(docs)),
	}
	room := f.maxTokens - len(g.Prefix) - len(tail)
	if room < 1 {
		return nil, errors.New("query too long for the model")
	}
	if opt.MaxDocTokens > 0 && opt.MaxDocTokens < room {
		room = opt.MaxDocTokens
	}
	for i, d := range docs {
		doc := runes(d)
		if len(doc) > room {
			if opt.NoTruncate {
				g.TooLong[i] = true
				continue
			}
			g.Truncated[i] = len(doc) - room
			doc = doc[:room]
		}
		g.Items[i] = append(doc, tail...)
	}
	return g, nil
}

func (f *fakeEngine) Forward(ctx context.Context, groups []*scorer.Group) (scorer.ForwardStats, error) {
	if f.started != nil {
		f.started <- groups
	}
	if f.release != nil {
		select {
		case <-f.release:
		case <-ctx.Done():
			f.mu.Lock()
			f.cancelled++
			f.passes = append(f.passes, len(groups))
			f.mu.Unlock()
			return scorer.ForwardStats{}, ctx.Err()
		}
	}
	f.mu.Lock()
	f.passes = append(f.passes, len(groups))
	f.mu.Unlock()
	if f.err != nil {
		return scorer.ForwardStats{}, f.err
	}
	var st scorer.ForwardStats
	for _, g := range groups {
		g.Logits = make([]float32, len(g.Items))
		for i, it := range g.Items {
			if len(it) > 0 {
				g.Logits[i] = 0.01 * float32(len(it)-len(tail))
			}
		}
		st.PrefixTokens += len(g.Prefix)
		st.ItemTokens += g.ItemTokens()
	}
	st.MoEVariants = map[string]int{"128": 2}
	st.MoEPaddingRatio = 1.25
	if f.truth != (costmodel.Coeffs{}) {
		st.Features = f.CostFeatures(groups)
		y := f.truth.Seconds(st.Features)
		if f.noise != nil {
			y *= f.noise()
		}
		st.Duration = time.Duration(y * float64(time.Second))
	}
	return st, nil
}

// CostFeatures counts every group's tokens, pairs and batch (costmodel.BatchFeatures).
func (f *fakeEngine) CostFeatures(groups []*scorer.Group) costmodel.Features {
	var fs costmodel.Features
	for _, g := range groups {
		fs = fs.Add(fakeFeatures(g))
	}
	return fs
}

func fakeFeatures(g *scorer.Group) costmodel.Features {
	var items []int
	for _, it := range g.Items {
		items = append(items, len(it))
	}
	return costmodel.BatchFeatures(len(g.Prefix), items, false)
}

// CostPrior is secPerToken per token and passCost per batch (a measured profile: the node does
// not calibrate), or prior when set.
func (f *fakeEngine) CostPrior() scorer.CostPrior {
	if f.prior != (scorer.CostPrior{}) {
		return f.prior
	}
	return scorer.CostPrior{Coeffs: costmodel.Coeffs{A: f.secPerToken, C: f.passCost}, Source: scorer.CostSourceProfile}
}

func (f *fakeEngine) Info() scorer.Info {
	return scorer.Info{Model: "fake", Architecture: "Fake", DType: "f32", Kernels: "generic", MaxTokens: f.maxTokens}
}

func (f *fakeEngine) passCounts() []int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int(nil), f.passes...)
}

type harness struct {
	n      *Node
	reg    *prometheus.Registry
	client pb.ScorerClient
	health healthpb.HealthClient
	conn   *grpc.ClientConn
}

func testConfig() Config {
	cfg := Default()
	cfg.GRPCAddr, cfg.HTTPAddr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.NodeID = "n1"
	cfg.Model = "fake"
	cfg.DrainTimeout = 10 * time.Second
	return cfg
}

// start runs a node with the given loader; it waits for the load unless wait is false.
func start(t *testing.T, cfg Config, load LoadFunc, wait bool) *harness {
	t.Helper()
	reg := prometheus.NewPedanticRegistry()
	n, err := New(cfg, load, Options{Registry: reg, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	if err := n.Start(); err != nil {
		t.Fatalf("Start: %v", err)
	}
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	h := &harness{n: n, reg: reg, client: pb.NewScorerClient(conn), health: healthpb.NewHealthClient(conn), conn: conn}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		n.Shutdown(ctx)
		conn.Close()
	})
	if wait {
		<-n.Loaded()
		if err := n.LoadErr(); err != nil {
			t.Fatalf("load: %v", err)
		}
	}
	return h
}

func loadEngine(e scorer.Engine) LoadFunc {
	return func(context.Context) (scorer.Engine, error) { return e, nil }
}

func batch(query string, docs ...string) *pb.ScoreBatchRequest {
	req := &pb.ScoreBatchRequest{Query: query}
	for i, d := range docs {
		req.Items = append(req.Items, &pb.Item{Id: string(rune('a' + i)), Text: d})
	}
	return req
}

func ctxT(t *testing.T) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// waitSched waits until cond holds on the scheduler's state (woken by its broadcasts).
func waitSched(t *testing.T, s *scheduler, what string, cond func(loadSnapshot) bool) {
	t.Helper()
	timeout := time.NewTimer(10 * time.Second)
	defer timeout.Stop()
	for {
		s.mu.Lock()
		ch := s.changed
		s.mu.Unlock()
		if cond(s.load()) {
			return
		}
		select {
		case <-ch:
		case <-timeout.C:
			t.Fatalf("timed out waiting for %s; load %+v", what, s.load())
		}
	}
}

type callResult struct {
	resp *pb.ScoreBatchResponse
	err  error
}

func goCall(ctx context.Context, h *harness, req *pb.ScoreBatchRequest) <-chan callResult {
	ch := make(chan callResult, 1)
	go func() {
		r, err := h.client.ScoreBatch(ctx, req)
		ch <- callResult{r, err}
	}()
	return ch
}

func sigmoid(x float32) float32 { return float32(1 / (1 + math.Exp(-float64(x)))) }

func TestScoreBatchOrderAndStats(t *testing.T) {
	f := newFake()
	h := start(t, testConfig(), loadEngine(f), true)
	docs := []string{"ccccc", "a", "bbbbbbbbbb", "dd"}
	req := batch("q", docs...)
	resp, err := h.client.ScoreBatch(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	var want []*pb.ItemScore
	P := len(runes("|q"))
	var itemTokens uint64
	for i, d := range docs {
		l := 0.01 * float32(len(d))
		want = append(want, &pb.ItemScore{Index: uint32(i), Id: req.Items[i].Id, Logit: l, Score: sigmoid(l),
			Status: pb.ItemStatus_ITEM_STATUS_OK, Tokens: uint32(len(d) + len(tail))})
		itemTokens += uint64(len(d) + len(tail))
	}
	opts := []cmp.Option{cmpopts.IgnoreUnexported(pb.ItemScore{}, pb.Usage{})}
	if diff := cmp.Diff(want, resp.Scores, opts...); diff != "" {
		t.Errorf("scores (-want +got):\n%s", diff)
	}
	wantUsage := &pb.Usage{PromptTokens: uint64(4*P) + itemTokens, PrefixTokens: uint64(P), PrefixTokensReused: uint64(3 * P), ItemTokens: itemTokens}
	if diff := cmp.Diff(wantUsage, resp.Usage, opts...); diff != "" {
		t.Errorf("usage (-want +got):\n%s", diff)
	}
	st := resp.Stats
	if st.MergedBatches != 1 || st.PrefixTokens != uint32(P) || st.ItemTokens != itemTokens || st.ForwardTokens != uint64(P)+itemTokens {
		t.Errorf("stats = %+v", st)
	}
	if st.ComputeSeconds != st.ForwardSeconds || st.QueueSeconds < 0 {
		t.Errorf("a lone batch's compute %v should be the pass's %v", st.ComputeSeconds, st.ForwardSeconds)
	}
	if resp.Model != "fake" || resp.NodeId != "n1" || resp.Emulated || resp.Load == nil {
		t.Errorf("model=%q node=%q emulated=%v load=%v", resp.Model, resp.NodeId, resp.Emulated, resp.Load)
	}
}

func TestTruncationStatuses(t *testing.T) {
	f := newFake()
	f.maxTokens = 20
	h := start(t, testConfig(), loadEngine(f), true)
	long := strings.Repeat("x", 40)
	resp, err := h.client.ScoreBatch(ctxT(t), batch("q", "short", long))
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Scores[1]; s.Status != pb.ItemStatus_ITEM_STATUS_TRUNCATED || s.TruncatedTokens == 0 {
		t.Errorf("long item = %v, want TRUNCATED", s)
	}
	// The reply says what it truncates to, so that the proxy prices long items as cut.
	if resp.MaxPromptTokens != 20 {
		t.Errorf("max_prompt_tokens %d, want the engine's 20", resp.MaxPromptTokens)
	}
	req := batch("q", "short", long)
	req.Options = &pb.ScoreOptions{Truncation: pb.Truncation_TRUNCATION_NONE}
	resp, err = h.client.ScoreBatch(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	if s := resp.Scores[1]; s.Status != pb.ItemStatus_ITEM_STATUS_TOO_LONG || s.Error == "" || s.Score != 0 {
		t.Errorf("long item with TRUNCATION_NONE = %v, want TOO_LONG", s)
	}
	if s := resp.Scores[0]; s.Status != pb.ItemStatus_ITEM_STATUS_OK {
		t.Errorf("short item = %v, want OK", s)
	}
	// Every item too long: answered without a forward pass.
	before := len(f.passCounts())
	req = batch("q", long)
	req.Options = &pb.ScoreOptions{Truncation: pb.Truncation_TRUNCATION_NONE}
	if _, err := h.client.ScoreBatch(ctxT(t), req); err != nil {
		t.Fatal(err)
	}
	if after := len(f.passCounts()); after != before {
		t.Errorf("a batch with nothing to score ran %d passes", after-before)
	}
}

// TestTooLongNamesTheLimitItExceeded: with TRUNCATION_NONE, a document over the request's
// max_tokens_per_item but far within the model's prompt limit is refused naming
// max_tokens_per_item, not only the model's limit (which it does not exceed).
func TestTooLongNamesTheLimitItExceeded(t *testing.T) {
	f := newFake()
	f.maxTokens = 1000
	h := start(t, testConfig(), loadEngine(f), true)
	req := batch("q", "short", strings.Repeat("x", 40))
	req.Options = &pb.ScoreOptions{Truncation: pb.Truncation_TRUNCATION_NONE, MaxTokensPerItem: 5}
	resp, err := h.client.ScoreBatch(ctxT(t), req)
	if err != nil {
		t.Fatal(err)
	}
	s := resp.Scores[1]
	if s.Status != pb.ItemStatus_ITEM_STATUS_TOO_LONG {
		t.Fatalf("long item = %v, want TOO_LONG", s)
	}
	if !strings.Contains(s.Error, "max_tokens_per_item (5)") {
		t.Errorf("error %q does not name the limit the document exceeded, max_tokens_per_item (5)", s.Error)
	}
}

func TestValidation(t *testing.T) {
	cfg := testConfig()
	cfg.MaxItems = 3
	cfg.MaxItemBytes = 10
	f := newFake()
	f.maxTokens = 30
	h := start(t, cfg, loadEngine(f), true)
	tests := []struct {
		name string
		req  *pb.ScoreBatchRequest
		want string
	}{
		{"empty query", batch("", "doc"), "query is empty"},
		{"no items", batch("q"), "no items"},
		{"too many items", batch("q", "a", "b", "c", "d"), "too many items: 4, the limit is 3"},
		{"item too big", batch("q", "ok", "this is too long"), "item 1: text is 16 bytes, the limit is 10"},
		{"query too long", batch(strings.Repeat("q", 40), "doc"), "query too long"},
		{"negative queued_ahead_seconds", withAhead(batch("q", "doc"), -1), "queued_ahead_seconds is -1"},
		{"NaN queued_ahead_seconds", withAhead(batch("q", "doc"), math.NaN()), "queued_ahead_seconds is NaN"},
		{"infinite queued_ahead_seconds", withAhead(batch("q", "doc"), math.Inf(1)), "queued_ahead_seconds is +Inf"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := h.client.ScoreBatch(ctxT(t), tt.req)
			if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("err = %v, want InvalidArgument containing %q", err, tt.want)
			}
		})
	}
	// Invalid UTF-8 cannot cross gRPC (protobuf refuses to marshal it); check validate directly.
	utf := []struct {
		name string
		req  *pb.ScoreBatchRequest
		want string
	}{
		{"query", batch("q\xff", "doc"), "query is not valid UTF-8"},
		{"instruction", &pb.ScoreBatchRequest{Query: "q", Instruction: "\xc3", Items: []*pb.Item{{Text: "d"}}}, "instruction is not valid UTF-8"},
		{"item", batch("q", "ok", "b\xffd"), "item 1: text is not valid UTF-8"},
	}
	for _, tt := range utf {
		if err := validate(tt.req, &cfg); err == nil || err.Error() != tt.want {
			t.Errorf("%s: validate = %v, want %q", tt.name, err, tt.want)
		}
	}
	if err := validate(batch("q", "fine"), &cfg); err != nil {
		t.Errorf("valid request: %v", err)
	}
}

// TestNodeReportsItsItemLimit: every reply carries the node's max_items, and a batch over it is
// refused with a BatchTooLarge saying the limit, so that a proxy whose batches are larger cuts
// them to it; it was a bare INVALID_ARGUMENT, which the proxy passed on to its client as bad
// input.
func TestNodeReportsItsItemLimit(t *testing.T) {
	cfg := testConfig()
	cfg.MaxItems = 3
	h := start(t, cfg, loadEngine(newFake()), true)
	resp, err := h.client.ScoreBatch(ctxT(t), batch("q", "a", "b"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetMaxBatchItems(); got != 3 {
		t.Errorf("reply's max_batch_items = %d, want 3", got)
	}
	_, err = h.client.ScoreBatch(ctxT(t), batch("q", "a", "b", "c", "d"))
	var detail *pb.BatchTooLarge
	for _, d := range status.Convert(err).Details() {
		if b, ok := d.(*pb.BatchTooLarge); ok {
			detail = b
		}
	}
	if status.Code(err) != codes.InvalidArgument || detail.GetItems() != 4 || detail.GetMaxBatchItems() != 3 {
		t.Errorf("over the limit: err = %v, detail %v; want InvalidArgument with BatchTooLarge{items 4, max_batch_items 3}", err, detail)
	}
	// Other refusals are the batch's own fault: no such detail.
	_, err = h.client.ScoreBatch(ctxT(t), batch("", "a"))
	if len(status.Convert(err).Details()) != 0 {
		t.Errorf("empty query: details %v, want none", status.Convert(err).Details())
	}
}

// hold starts a node whose engine holds every pass until released, and occupies the worker
// with one call; it returns that call's result channel.
func hold(t *testing.T, cfg Config, f *fakeEngine) (*harness, <-chan callResult) {
	t.Helper()
	f.release = make(chan struct{})
	h := start(t, cfg, loadEngine(f), true)
	first := goCall(ctxT(t), h, batch("first", "doc"))
	<-f.started
	return h, first
}

func withAhead(r *pb.ScoreBatchRequest, ahead float64) *pb.ScoreBatchRequest {
	r.QueuedAheadSeconds = ahead
	return r
}

// TestQueuesInTheCallersPlannedOrder: batches that arrive together run in the order of their
// arrival plus the work their caller projected ahead of each (queued_ahead_seconds), not in the
// order their calls happened to arrive; without it, in arrival order.
func TestQueuesInTheCallersPlannedOrder(t *testing.T) {
	f := newFake()
	// No merge pays (no fixed cost, and the fake reports the model's own time, so none is
	// learned): every batch runs in a pass of its own, so the passes show the order.
	f.passCost, f.truth = 0, costmodel.Coeffs{A: f.secPerToken}
	h, first := hold(t, testConfig(), f)
	// Arrival order: q2 (planned third: 20 s ahead), q0 (first), q1 (10 s ahead), q3 (none).
	// q3 arrives last with nothing ahead, so it goes behind q0 only.
	var calls []<-chan callResult
	for i, c := range []struct {
		q     string
		ahead float64
	}{{"q2", 20}, {"q0", 0}, {"q1", 10}, {"q3", 0}} {
		calls = append(calls, goCall(ctxT(t), h, withAhead(batch(c.q, "doc"), c.ahead)))
		waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == i+1 })
	}
	close(f.release)
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	for _, c := range calls {
		if r := <-c; r.err != nil {
			t.Fatal(r.err)
		}
	}
	var got []string
	for range 4 {
		gs := <-f.started
		got = append(got, string(runes(string(gs[0].Prefix))[1:]))
	}
	if diff := cmp.Diff([]string{"q0", "q3", "q1", "q2"}, got); diff != "" {
		t.Errorf("pass order (-want +got):\n%s", diff)
	}
}

func TestMergesQueuedBatches(t *testing.T) {
	f := newFake()
	cfg := testConfig()
	// Each queued batch below is |qN + 2 items of 5+2 tokens = 3+14 = 17 tokens; 40 fits two.
	cfg.MaxBatchTokens = 40
	h, first := hold(t, cfg, f)
	var calls []<-chan callResult
	for i := 0; i < 3; i++ {
		// Submit one at a time so the queue order is known.
		calls = append(calls, goCall(ctxT(t), h, batch("q"+string(rune('0'+i)), "aaaaa", "bbbbb")))
		waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == i+1 })
	}
	if l := h.n.sched.load(); l.InflightBatches != 1 || l.QueuedTokens != 3*17 || l.QueuedCostSeconds <= 0 {
		t.Errorf("load while held = %+v", l)
	}
	close(f.release)
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	var merged []uint32
	for _, c := range calls {
		r := <-c
		if r.err != nil {
			t.Fatal(r.err)
		}
		merged = append(merged, r.resp.Stats.MergedBatches)
		if r.resp.Stats.ComputeSeconds > r.resp.Stats.ForwardSeconds {
			t.Errorf("compute share %v > pass %v", r.resp.Stats.ComputeSeconds, r.resp.Stats.ForwardSeconds)
		}
		if r.resp.Scores[0].Logit != 0.01*float32(5) {
			t.Errorf("merged pass mixed up outputs: %v", r.resp.Scores[0])
		}
	}
	if diff := cmp.Diff([]int{1, 2, 1}, f.passCounts()); diff != "" {
		t.Errorf("groups per pass (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]uint32{2, 2, 1}, merged); diff != "" {
		t.Errorf("merged_batches (-want +got):\n%s", diff)
	}
}

func TestCancelledCallerGetsNoWork(t *testing.T) {
	f := newFake()
	h, first := hold(t, testConfig(), f)
	ctx, cancel := context.WithCancel(context.Background())
	gone := goCall(ctx, h, batch("gone", "doc"))
	waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == 1 })
	cancel()
	if r := <-gone; status.Code(r.err) != codes.Canceled {
		t.Fatalf("cancelled call err = %v, want Canceled", r.err)
	}
	waitSched(t, h.n.sched, "dropped", func(l loadSnapshot) bool { return l.QueuedBatches == 0 })
	close(f.release)
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	// A later call runs; the cancelled one never reached the engine.
	if _, err := h.client.ScoreBatch(ctxT(t), batch("later", "doc")); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]int{1, 1}, f.passCounts()); diff != "" {
		t.Errorf("groups per pass (-want +got):\n%s", diff)
	}
	// hold consumed the first pass's signal; the second pass is the later call's.
	if gs := <-f.started; len(gs) != 1 || string(runes("|later")) != string(gs[0].Prefix) {
		t.Error("the second pass was not the later call alone")
	}
}

func TestQueuedJobWithDoneCtxDropped(t *testing.T) {
	// The worker-side check: a job whose caller has gone but is still queued is never run.
	f := newFake()
	s := newScheduler(100, 10, false)
	s.start(f, nil)
	defer s.stop()
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	g, _ := f.Tokenize("", "q", []string{"d"}, scorer.TokenizeOptions{})
	if err := s.admit(); err != nil {
		t.Fatal(err)
	}
	j, err := s.submit(ctx, f, g, time.Time{})
	if err != nil {
		t.Fatal(err)
	}
	if r := <-j.done; status.Code(r.err) != codes.Canceled {
		t.Errorf("err = %v, want Canceled", r.err)
	}
	if n := len(f.passCounts()); n != 0 {
		t.Errorf("%d passes ran for a gone caller", n)
	}
}

func TestCancelMidForward(t *testing.T) {
	f := newFake()
	f.release = make(chan struct{})
	h := start(t, testConfig(), loadEngine(f), true)
	ctx, cancel := context.WithCancel(context.Background())
	call := goCall(ctx, h, batch("q", "doc"))
	<-f.started
	cancel()
	if r := <-call; status.Code(r.err) != codes.Canceled {
		t.Fatalf("err = %v, want Canceled", r.err)
	}
	waitSched(t, h.n.sched, "pass ended", func(l loadSnapshot) bool { return l.InflightBatches == 0 })
	f.mu.Lock()
	c := f.cancelled
	f.mu.Unlock()
	if c != 1 {
		t.Errorf("cancelled passes = %d, want 1 (every caller gone cancels Forward)", c)
	}
}

func TestDeadlineFailsEarly(t *testing.T) {
	f := newFake()
	f.secPerToken = 10 // any batch is estimated far beyond its deadline
	h := start(t, testConfig(), loadEngine(f), true)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	_, err := h.client.ScoreBatch(ctx, batch("q", "doc"))
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(err.Error(), "cannot finish before its deadline") {
		t.Fatalf("err = %v, want an early DeadlineExceeded", err)
	}
	if n := len(f.passCounts()); n != 0 {
		t.Errorf("%d passes ran for a batch that could not make its deadline", n)
	}
}

func TestQueueFull(t *testing.T) {
	f := newFake()
	cfg := testConfig()
	cfg.MaxQueueBatches = 1
	h, first := hold(t, cfg, f)
	queued := goCall(ctxT(t), h, batch("q1", "doc"))
	waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == 1 })
	_, err := h.client.ScoreBatch(ctxT(t), batch("q2", "doc"))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("err = %v, want ResourceExhausted", err)
	}
	close(f.release)
	for _, c := range []<-chan callResult{first, queued} {
		if r := <-c; r.err != nil {
			t.Error(r.err)
		}
	}
}

func TestForwardFailure(t *testing.T) {
	f := newFake()
	f.err = errors.New("boom")
	h := start(t, testConfig(), loadEngine(f), true)
	_, err := h.client.ScoreBatch(ctxT(t), batch("q", "doc"))
	if status.Code(err) != codes.Internal || !strings.Contains(err.Error(), "boom") {
		t.Errorf("err = %v, want Internal naming the cause", err)
	}
}

func checkHealth(t *testing.T, h *harness, want healthpb.HealthCheckResponse_ServingStatus) {
	t.Helper()
	for _, svc := range []string{"", "relevance.v1.Scorer"} {
		r, err := h.health.Check(ctxT(t), &healthpb.HealthCheckRequest{Service: svc})
		if err != nil {
			t.Fatalf("health %q: %v", svc, err)
		}
		if r.Status != want {
			t.Errorf("health %q = %v, want %v", svc, r.Status, want)
		}
	}
}

func get(t *testing.T, h *harness, path string) (int, string) {
	t.Helper()
	resp, err := http.Get("http://" + h.n.HTTPAddr() + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, string(b)
}

func TestHealthTransitions(t *testing.T) {
	f := newFake()
	gate := make(chan struct{})
	h := start(t, testConfig(), func(ctx context.Context) (scorer.Engine, error) {
		select {
		case <-gate:
			return f, nil
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}, false)

	// Loading: health answers NOT_SERVING, readyz 503, calls UNAVAILABLE, healthz alive.
	checkHealth(t, h, healthpb.HealthCheckResponse_NOT_SERVING)
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "loading") {
		t.Errorf("readyz while loading = %d %q", code, body)
	}
	if code, _ := get(t, h, "/healthz"); code != 200 {
		t.Errorf("healthz = %d", code)
	}
	if _, err := h.client.ScoreBatch(ctxT(t), batch("q", "d")); status.Code(err) != codes.Unavailable {
		t.Errorf("call while loading err = %v, want Unavailable", err)
	}

	close(gate)
	<-h.n.Loaded()
	checkHealth(t, h, healthpb.HealthCheckResponse_SERVING)
	if code, _ := get(t, h, "/readyz"); code != 200 {
		t.Errorf("readyz when loaded = %d", code)
	}

	if err := h.n.Drain(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	checkHealth(t, h, healthpb.HealthCheckResponse_NOT_SERVING)
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "draining") {
		t.Errorf("readyz while draining = %d %q", code, body)
	}
	if _, err := h.client.ScoreBatch(ctxT(t), batch("q", "d")); status.Code(err) != codes.Unavailable {
		t.Errorf("call while draining err = %v, want Unavailable", err)
	}
}

func TestLoadFailure(t *testing.T) {
	h := start(t, testConfig(), func(context.Context) (scorer.Engine, error) {
		return nil, errors.New("no such model")
	}, false)
	<-h.n.Loaded()
	if err := h.n.LoadErr(); err == nil || !strings.Contains(err.Error(), "no such model") {
		t.Errorf("LoadErr = %v", err)
	}
	checkHealth(t, h, healthpb.HealthCheckResponse_NOT_SERVING)
	if code, body := get(t, h, "/readyz"); code != 503 || !strings.Contains(body, "no such model") {
		t.Errorf("readyz = %d %q", code, body)
	}
}

func TestShutdownDuringLoadCancelsIt(t *testing.T) {
	h := start(t, testConfig(), func(ctx context.Context) (scorer.Engine, error) {
		<-ctx.Done()
		return nil, ctx.Err()
	}, false)
	if err := h.n.Shutdown(ctxT(t)); err != nil {
		t.Fatal(err)
	}
	<-h.n.Loaded()
}

func TestDrainFinishesInFlightWork(t *testing.T) {
	f := newFake()
	h, first := hold(t, testConfig(), f)
	queued := goCall(ctxT(t), h, batch("queued", "doc"))
	waitSched(t, h.n.sched, "queued", func(l loadSnapshot) bool { return l.QueuedBatches == 1 })

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
	if _, err := h.client.ScoreBatch(ctxT(t), batch("new", "doc")); status.Code(err) != codes.Unavailable {
		t.Errorf("new call during drain err = %v, want Unavailable", err)
	}
	select {
	case err := <-shut:
		t.Fatalf("Shutdown returned (%v) with work in flight", err)
	default:
	}
	close(f.release)
	for _, c := range []<-chan callResult{first, queued} {
		if r := <-c; r.err != nil {
			t.Errorf("in-flight call failed during drain: %v", r.err)
		}
	}
	if err := <-shut; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func TestDrainTimeoutFailsLeftovers(t *testing.T) {
	f := newFake()
	cfg := testConfig()
	cfg.DrainTimeout = time.Millisecond
	h, first := hold(t, cfg, f)
	err := h.n.Shutdown(ctxT(t))
	if !errors.Is(err, context.DeadlineExceeded) {
		t.Errorf("Shutdown err = %v, want the drain's deadline", err)
	}
	if r := <-first; r.err == nil {
		t.Error("a pass cut by shutdown reported success")
	}
}

func TestStatusEmulated(t *testing.T) {
	cfg := testConfig()
	cfg.Engine, cfg.CostProfile, cfg.Model = EngineEmulated, "profile.json", "small"
	h := start(t, cfg, func(context.Context) (scorer.Engine, error) {
		return emulated.New(emulated.Options{
			Profile:          &costmodel.Profile{Coeffs: costmodel.Coeffs{A: 1e-6, C: 1e-4}},
			Model:            "small",
			Sleep:            func(ctx context.Context, d time.Duration) error { return ctx.Err() },
			PrefixCacheBytes: 64 << 20, // its metrics are tested in package prefixcache
		})
	}, true)
	for i := 0; i < 2; i++ {
		resp, err := h.client.ScoreBatch(ctxT(t), batch("red shoes", "Red running shoes", "Kettle"))
		if err != nil {
			t.Fatal(err)
		}
		if !resp.Emulated {
			t.Error("reply not marked emulated")
		}
		if i == 1 && !resp.Stats.PrefixCached {
			t.Error("second call's prefix not from the cache")
		}
	}
	code, body := get(t, h, "/v1/status")
	if code != 200 {
		t.Fatalf("status code %d", code)
	}
	var st Status
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		t.Fatalf("decode %q: %v", body, err)
	}
	if st.NodeID != "n1" || st.Engine != "EMULATED" || !st.Emulated || st.Architecture != "emulated" || !st.Ready || st.Draining {
		t.Errorf("status = %+v", st)
	}
	// Two entries after one query: its whole prefix and its template (head + instruction), which
	// the next query of the instruction extends, as the real engine keeps them.
	if st.PrefixCache == nil || st.PrefixCache.Hits != 1 || st.PrefixCache.Entries != 2 {
		t.Errorf("prefix cache stats = %+v", st.PrefixCache)
	}
	if st.TokensPerSecond <= 0 || st.UptimeSeconds <= 0 {
		t.Errorf("tokens/s %v uptime %v", st.TokensPerSecond, st.UptimeSeconds)
	}
	for _, key := range []string{`"inflight_batches"`, `"queued_batches"`, `"queued_cost_seconds"`, `"moe_policy"`, `"kernels"`, `"dtype"`} {
		if !strings.Contains(body, key) {
			t.Errorf("status JSON lacks %s", key)
		}
	}
}

func TestMetrics(t *testing.T) {
	f := newFake()
	h := start(t, testConfig(), loadEngine(f), true)
	if _, err := h.client.ScoreBatch(ctxT(t), batch("q", "doc", "doc2")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.client.ScoreBatch(ctxT(t), batch("", "doc")); status.Code(err) != codes.InvalidArgument {
		t.Fatal(err)
	}
	problems, err := testutil.GatherAndLint(h.reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP relevance_scorer_forward_passes_total Forward passes run (successful or not).
# TYPE relevance_scorer_forward_passes_total counter
relevance_scorer_forward_passes_total 1
# HELP relevance_scorer_moe_blockm_total MoE layer kernel choices by tile variant (blockM).
# TYPE relevance_scorer_moe_blockm_total counter
relevance_scorer_moe_blockm_total{block_m="128"} 2
# HELP relevance_scorer_moe_padding_ratio Mean MoE padding overhead ratio of the last forward pass (padded rows / routed rows; 0 when dense).
# TYPE relevance_scorer_moe_padding_ratio gauge
relevance_scorer_moe_padding_ratio 1.25
# HELP relevance_scorer_tokens_total Prompt tokens by kind: prefix (computed), item (computed), reused (prefix not recomputed).
# TYPE relevance_scorer_tokens_total counter
relevance_scorer_tokens_total{kind="item"} 11
relevance_scorer_tokens_total{kind="prefix"} 2
relevance_scorer_tokens_total{kind="reused"} 0
# HELP relevance_scorer_errors_total ScoreBatch failures by reason.
# TYPE relevance_scorer_errors_total counter
relevance_scorer_errors_total{reason="cancelled"} 0
relevance_scorer_errors_total{reason="deadline"} 0
relevance_scorer_errors_total{reason="forward"} 0
relevance_scorer_errors_total{reason="invalid_argument"} 1
relevance_scorer_errors_total{reason="panic"} 0
relevance_scorer_errors_total{reason="queue_full"} 0
relevance_scorer_errors_total{reason="tokenize"} 0
relevance_scorer_errors_total{reason="unavailable"} 0
# HELP relevance_scorer_info The loaded engine (value 1).
# TYPE relevance_scorer_info gauge
relevance_scorer_info{arch="Fake",dtype="f32",emulated="false",kernels="generic",model="fake",moe_policy="",node_id="n1"} 1
# HELP relevance_scorer_queue_depth Batches waiting in the scheduler queue.
# TYPE relevance_scorer_queue_depth gauge
relevance_scorer_queue_depth 0
`
	if err := testutil.GatherAndCompare(h.reg, strings.NewReader(want),
		"relevance_scorer_forward_passes_total", "relevance_scorer_moe_blockm_total", "relevance_scorer_moe_padding_ratio",
		"relevance_scorer_tokens_total", "relevance_scorer_errors_total", "relevance_scorer_info", "relevance_scorer_queue_depth"); err != nil {
		t.Error(err)
	}
	if got := testutil.ToFloat64(h.n.m.requests.WithLabelValues("OK")); got != 1 {
		t.Errorf("requests_total{code=OK} = %v", got)
	}
	if n := testutil.CollectAndCount(h.n.m.batchDuration); n != 1 {
		t.Errorf("batch_duration series = %d", n)
	}

	code, body := get(t, h, "/metrics")
	if code != 200 || !strings.Contains(body, "relevance_scorer_batch_duration_seconds_bucket") {
		t.Fatalf("/metrics = %d", code)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Skip("promtool not on PATH; the exposition was linted with testutil above")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		t.Errorf("promtool check metrics: %v\n%s", err, out.String())
	}
}

func TestConfig(t *testing.T) {
	tests := []struct {
		name string
		yaml string
		want string // error substring; "" means valid
	}{
		{"defaults plus model", "model: /m\n", ""},
		{"emulated", "engine: emulated\ncost_profile: p.json\ndrain_timeout: 2s\n", ""},
		{"unknown key", "model: /m\nbogus: 1\n", "field bogus not found"},
		{"bad engine", "engine: gpu\n", `engine: must be "real" or "emulated", got "gpu"`},
		{"real needs model", "engine: real\n", "model: required"},
		{"emulated needs profile", "engine: emulated\n", "cost_profile: required"},
		{"bad addr", "model: /m\ngrpc_addr: nope\n", `grpc_addr: must be host:port, got "nope"`},
		{"zero items", "model: /m\nmax_items: 0\n", "max_items: must be ≥ 1, got 0"},
		{"negative cache", "model: /m\nprefix_cache_bytes: -5\n", "prefix_cache_bytes: must be ≥ 0, got -5"},
		{"negative calibration age", "model: /m\ncalibration_cache_max_age: -1h\n", "calibration_cache_max_age: must be ≥ 0, got -1h0m0s"},
		{"negative recv timeout", "model: /m\nrecv_timeout: -1s\n", "recv_timeout: must be ≥ 0, got -1s"},
		{"no recv timeout", "model: /m\nrecv_timeout: 0s\n", ""},
		{"streams below the derived limit", "model: /m\nmax_concurrent_streams: 100\n", "max_concurrent_streams: must be 0 (derived: 576)"},
		{"bad policy", "model: /m\nmoe_policy: fixed:x\n", `moe_policy: moe policy "fixed:x": unknown MoE variant "x"`},
		{"fixed policy", "model: /m\nmoe_policy: fixed:64\n", ""},
		{"bad bf16 matmul", "model: /m\nbf16_matmul: fp8\n", `bf16_matmul: "fp8": want auto, widen or bf16`},
		{"bf16 matmul", "model: /m\nbf16_matmul: widen\n", ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := Default()
			err := cfg.Decode([]byte(tt.yaml))
			if err == nil {
				err = cfg.Validate()
			}
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("err = %v, want it to contain %q", err, tt.want)
			}
		})
	}
	cfg := Default()
	if err := cfg.Decode([]byte("drain_timeout: 2s\nmax_batch_tokens: 100\n")); err != nil {
		t.Fatal(err)
	}
	if cfg.DrainTimeout != 2*time.Second || cfg.MaxBatchTokens != 100 || cfg.GRPCAddr != "127.0.0.1:7070" {
		t.Errorf("decoded %+v", cfg)
	}
	if got := cfg.maxRecvBytes(); got != 1024*(64<<10+64)+1<<20 {
		t.Errorf("maxRecvBytes = %d", got)
	}
}

func TestPartialCancelKeepsPassRunning(t *testing.T) {
	f := newFake()
	h, first := hold(t, testConfig(), f)
	ctxA, cancelA := context.WithCancel(context.Background())
	defer cancelA()
	a := goCall(ctxA, h, batch("a", "doc"))
	waitSched(t, h.n.sched, "a queued", func(l loadSnapshot) bool { return l.QueuedBatches == 1 })
	b := goCall(ctxT(t), h, batch("b", "doc"))
	waitSched(t, h.n.sched, "b queued", func(l loadSnapshot) bool { return l.QueuedBatches == 2 })
	f.release <- struct{}{} // finish the first pass only
	if r := <-first; r.err != nil {
		t.Fatal(r.err)
	}
	if gs := <-f.started; len(gs) != 2 {
		t.Fatalf("second pass has %d groups, want a and b merged", len(gs))
	}
	cancelA()
	if r := <-a; status.Code(r.err) != codes.Canceled {
		t.Fatalf("a err = %v, want Canceled", r.err)
	}
	close(f.release) // the pass was not cancelled: b is still waiting for it
	if r := <-b; r.err != nil {
		t.Fatalf("b failed after a left the merged pass: %v", r.err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.cancelled != 0 {
		t.Errorf("%d passes cancelled; one live caller must keep the pass running", f.cancelled)
	}
}

// BenchmarkScoreBatch measures the node's own overhead per call (gRPC, validation, fake
// tokenize, scheduler hand-off, reply) with an engine that takes no time; run with -cpu to vary
// concurrency (calls merge when they queue behind a pass).
func BenchmarkScoreBatch(b *testing.B) {
	cfg := Default()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.Model = "127.0.0.1:0", "127.0.0.1:0", "fake"
	f := newFake()
	f.maxTokens, f.started = 4096, nil // many passes: nobody reads started
	n, err := New(cfg, loadEngine(f), Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		b.Fatal(err)
	}
	if err := n.Start(); err != nil {
		b.Fatal(err)
	}
	defer n.Shutdown(context.Background())
	<-n.Loaded()
	conn, err := grpc.NewClient(n.GRPCAddr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		b.Fatal(err)
	}
	defer conn.Close()
	c := pb.NewScorerClient(conn)
	docs := make([]string, 16)
	for i := range docs {
		docs[i] = strings.Repeat("product text ", 60)
	}
	req := batch("red running shoes", docs...)
	b.SetParallelism(4)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := c.ScoreBatch(context.Background(), req); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.StopTimer()
	if passes := len(f.passCounts()); passes > 0 {
		b.ReportMetric(float64(b.N)/float64(passes), "batches/pass")
	}
}

func TestConcurrentCallsHammer(t *testing.T) {
	f := newFake()
	f.started = nil
	cfg := testConfig()
	cfg.MaxBatchTokens = 200
	h := start(t, cfg, loadEngine(f), true)
	const workers, calls = 8, 25
	var wg sync.WaitGroup
	errs := make(chan error, workers*calls)
	for w := 0; w < workers; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < calls; i++ {
				ctx, cancel := context.WithCancel(context.Background())
				if i%5 == 4 {
					cancel() // some callers give up at once
				}
				docs := []string{strings.Repeat("d", 1+(w+i)%7), strings.Repeat("e", 1+i%3)}
				resp, err := h.client.ScoreBatch(ctx, batch("q"+string(rune('a'+w)), docs...))
				cancel()
				switch {
				case i%5 == 4:
					if status.Code(err) != codes.Canceled {
						errs <- err
					}
				case err != nil:
					errs <- err
				default:
					for k, d := range docs {
						if got, want := resp.Scores[k].Logit, 0.01*float32(len(d)); got != want {
							errs <- errors.New("wrong logit for a merged batch")
						}
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if l := h.n.sched.load(); l.QueuedBatches != 0 || l.InflightBatches != 0 || l.QueuedTokens != 0 || l.QueuedCostSeconds != 0 {
		t.Errorf("load after the hammer = %+v, want empty", l)
	}
}

func TestMaxRequestBytes(t *testing.T) {
	cfg := testConfig()
	cfg.MaxRequestBytes = 2048
	h := start(t, cfg, loadEngine(newFake()), true)
	_, err := h.client.ScoreBatch(ctxT(t), batch("q", strings.Repeat("x", 4000)))
	if status.Code(err) != codes.ResourceExhausted {
		t.Errorf("err = %v, want ResourceExhausted for a message over max_request_bytes", err)
	}
	if _, err := h.client.ScoreBatch(ctxT(t), batch("q", "small")); err != nil {
		t.Errorf("small request: %v", err)
	}
}

func TestShutdownWithOpenHealthWatch(t *testing.T) {
	h := start(t, testConfig(), loadEngine(newFake()), true)
	h.n.stopGrace = 50 * time.Millisecond
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := h.health.Watch(ctx, &healthpb.HealthCheckRequest{Service: ""})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("watch first = %v, %v", r, err)
	}
	done := make(chan error, 1)
	go func() { done <- h.n.Shutdown(context.Background()) }()
	// The watcher sees NOT_SERVING as the drain starts.
	if r, err := w.Recv(); err != nil || r.Status != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Errorf("watch after shutdown = %v, %v; want NOT_SERVING", r, err)
	}
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Shutdown hung on an open health Watch stream")
	}
}
