package fakenode

import (
	"context"
	"fmt"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func dial(t testing.TB, n *Node) *grpc.ClientConn {
	t.Helper()
	cc, err := grpc.NewClient(n.Addr(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { cc.Close() })
	return cc
}

func start(t testing.TB, o Options) *Node {
	t.Helper()
	n, err := Start(o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	return n
}

func batch(texts ...string) *relevancev1.ScoreBatchRequest {
	r := &relevancev1.ScoreBatchRequest{Query: "q"}
	for _, s := range texts {
		r.Items = append(r.Items, &relevancev1.Item{Id: "id-" + s, Text: s})
	}
	return r
}

func TestScoreBatch(t *testing.T) {
	n := start(t, Options{Coeffs: costmodel.Coeffs{A: 1e-6, C: 1e-3}})
	c := relevancev1.NewScorerClient(dial(t, n))
	resp, err := c.ScoreBatch(context.Background(), batch("abcd", "abcdefgh"))
	if err != nil {
		t.Fatal(err)
	}
	type row struct {
		Index  uint32
		ID     string
		Score  float32
		Tokens uint32
	}
	var got []row
	for _, s := range resp.GetScores() {
		got = append(got, row{s.GetIndex(), s.GetId(), s.GetScore(), s.GetTokens()})
	}
	want := []row{{0, "id-abcd", Score("q", "abcd"), 1 + 12}, {1, "id-abcdefgh", Score("q", "abcdefgh"), 2 + 12}}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("scores (-want +got):\n%s", d)
	}
	// The node measures the pass: the scripted time plus the timer's lateness.
	st := resp.GetStats()
	wantSec := costmodel.Coeffs{A: 1e-6, C: 1e-3}.Seconds(costmodel.BatchFeatures(41, []int{13, 14}, false))
	if st.GetPrefixTokens() != 41 || st.GetItemTokens() != 27 || st.GetComputeSeconds() < wantSec || st.GetComputeSeconds() > wantSec+0.1 {
		t.Errorf("stats = %v, want prefix 41, items 27, compute %v", st, wantSec)
	}
	// The node's cost model starts from the scripted cost and is reported with the load.
	if cm := resp.GetLoad().GetCostModel(); cm.GetA() <= 0 || cm.GetC() <= 0 || cm.GetSource() != "config" {
		t.Errorf("reported cost model %v, want one started from a=1e-6, c=1e-3", cm)
	}
	if resp.GetModel() != "fakenode" || !resp.GetEmulated() {
		t.Errorf("model %q emulated %v", resp.GetModel(), resp.GetEmulated())
	}
	if n.Calls() != 1 || n.Batches() != 1 || n.Items() != 2 {
		t.Errorf("calls/batches/items = %d/%d/%d, want 1/1/2", n.Calls(), n.Batches(), n.Items())
	}
}

// TestScoresBitExact: what the node replies is Score's value bit for bit, after the node's own
// logit → score conversion; SetModel changes the fingerprint and shifts later scores.
func TestScoresBitExact(t *testing.T) {
	n := start(t, Options{Fingerprint: "model-a"})
	c := relevancev1.NewScorerClient(dial(t, n))
	var texts []string
	for i := range 500 {
		texts = append(texts, fmt.Sprintf("item text %d", i))
	}
	resp, err := c.ScoreBatch(context.Background(), batch(texts...))
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range resp.GetScores() {
		if want := Score("q", texts[i]); s.GetScore() != want {
			t.Fatalf("item %d: score %v, want %v exactly", i, s.GetScore(), want)
		}
	}
	if fp := resp.GetModelFingerprint(); fp != "model-a" {
		t.Errorf("fingerprint %q, want model-a", fp)
	}
	n.SetModel("model-b", 0.25)
	resp, err = c.ScoreBatch(context.Background(), batch(texts[:1]...))
	if err != nil {
		t.Fatal(err)
	}
	want := min(Score("q", texts[0])+0.25, 1-1e-6)
	if got := resp.GetScores()[0].GetScore(); resp.GetModelFingerprint() != "model-b" || math.Abs(float64(got-want)) > 1e-5 {
		t.Errorf("after SetModel: fingerprint %q score %v, want model-b %v", resp.GetModelFingerprint(), got, want)
	}
}

func TestFailures(t *testing.T) {
	n := start(t, Options{})
	c := relevancev1.NewScorerClient(dial(t, n))
	n.FailNext(2, codes.Internal)
	for i, want := range []codes.Code{codes.Internal, codes.Internal, codes.OK} {
		_, err := c.ScoreBatch(context.Background(), batch("x"))
		if got := status.Code(err); got != want {
			t.Errorf("call %d: code %v, want %v", i, got, want)
		}
	}
	n.SetFailing(true, codes.Unavailable)
	if _, err := c.ScoreBatch(context.Background(), batch("x")); status.Code(err) != codes.Unavailable {
		t.Errorf("failing: got %v", err)
	}
	n.SetFailing(false, codes.OK)
	if _, err := c.ScoreBatch(context.Background(), batch("x")); err != nil {
		t.Errorf("recovered: %v", err)
	}
	if _, err := c.ScoreBatch(context.Background(), batch()); status.Code(err) != codes.InvalidArgument {
		t.Errorf("empty batch: got %v, want InvalidArgument", err)
	}
}

func TestHang(t *testing.T) {
	n := start(t, Options{})
	c := relevancev1.NewScorerClient(dial(t, n))
	n.SetHang(true)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if _, err := c.ScoreBatch(ctx, batch("x")); status.Code(err) != codes.DeadlineExceeded {
		t.Fatalf("hung call: got %v, want DeadlineExceeded", err)
	}
	// A hung call is freed by SetHang(false).
	errc := make(chan error, 1)
	go func() {
		_, err := c.ScoreBatch(context.Background(), batch("x"))
		errc <- err
	}()
	for n.Calls() < 2 {
		time.Sleep(time.Millisecond) // waits for the call to arrive; bounded by the test timeout
	}
	n.SetHang(false)
	if err := <-errc; err != nil {
		t.Fatalf("released call: %v", err)
	}
}

func TestSerialQueueAndLoad(t *testing.T) {
	n := start(t, Options{Latency: func(Batch) time.Duration { return 30 * time.Millisecond }})
	n.SetReportedLoad(2)
	c := relevancev1.NewScorerClient(dial(t, n))
	start := time.Now()
	errc := make(chan error, 3)
	for range 3 {
		go func() {
			_, err := c.ScoreBatch(context.Background(), batch("x"))
			errc <- err
		}()
	}
	for range 3 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	if el := time.Since(start); el < 90*time.Millisecond {
		t.Errorf("3 batches of 30ms took %v on a serial node, want ≥ 90ms", el)
	}
	resp, err := c.ScoreBatch(context.Background(), batch("x"))
	if err != nil {
		t.Fatal(err)
	}
	if got := resp.GetLoad().GetQueuedCostSeconds(); got != 2 {
		t.Errorf("reported load = %v, want 2 (phantom) + 0", got)
	}
	n.SetReportedLoad(math.NaN()) // a buggy node's report passes through as it is
	if resp, err = c.ScoreBatch(context.Background(), batch("x")); err != nil || !math.IsNaN(resp.GetLoad().GetQueuedCostSeconds()) {
		t.Errorf("reported load NaN: got %v, %v", resp.GetLoad().GetQueuedCostSeconds(), err)
	}
}

func TestParallel(t *testing.T) {
	n := start(t, Options{Latency: func(Batch) time.Duration { return 100 * time.Millisecond }, Parallel: true})
	c := relevancev1.NewScorerClient(dial(t, n))
	start := time.Now()
	errc := make(chan error, 4)
	for range 4 {
		go func() {
			_, err := c.ScoreBatch(context.Background(), batch("x"))
			errc <- err
		}()
	}
	for range 4 {
		if err := <-errc; err != nil {
			t.Fatal(err)
		}
	}
	// At most two passes: the first batch's, and one with the batches that queued behind it.
	if el := time.Since(start); el >= 350*time.Millisecond {
		t.Errorf("4 batches of 100ms took %v on a parallel node, want well under 400ms", el)
	}
}

// TestDeadlineCheck: the node knows the scripted cost, so it refuses at once a batch that cannot
// finish before its deadline, as a real node does.
func TestDeadlineCheck(t *testing.T) {
	n := start(t, Options{Latency: func(Batch) time.Duration { return 2 * time.Second }})
	c := relevancev1.NewScorerClient(dial(t, n))
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	start := time.Now()
	_, err := c.ScoreBatch(ctx, batch("x"))
	if status.Code(err) != codes.DeadlineExceeded || !strings.Contains(status.Convert(err).Message(), "cannot finish") {
		t.Errorf("2s batch with 1s left: %v, want the node's DeadlineExceeded", err)
	}
	if el := time.Since(start); el > 500*time.Millisecond {
		t.Errorf("refused after %v, want at once", el)
	}
}

func TestHealthFlip(t *testing.T) {
	n := start(t, Options{})
	h := healthpb.NewHealthClient(dial(t, n))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	w, err := h.Watch(ctx, &healthpb.HealthCheckRequest{})
	if err != nil {
		t.Fatal(err)
	}
	next := func() healthpb.HealthCheckResponse_ServingStatus {
		t.Helper()
		r, err := w.Recv()
		if err != nil {
			t.Fatal(err)
		}
		return r.GetStatus()
	}
	if s := next(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("initial %v", s)
	}
	n.SetServing(false)
	if s := next(); s != healthpb.HealthCheckResponse_NOT_SERVING {
		t.Fatalf("after flip %v", s)
	}
	n.SetServing(true)
	if s := next(); s != healthpb.HealthCheckResponse_SERVING {
		t.Fatalf("after flip back %v", s)
	}
}

func TestCluster(t *testing.T) {
	c, err := StartCluster(3, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(c.Addrs()) != 3 || c.Addrs()[0] == c.Addrs()[1] {
		t.Errorf("addrs %v", c.Addrs())
	}
}
