package scorer_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/backend"
	"github.com/relevance-scoring/relevance/proxy/backend/internal/conformance"
	"github.com/relevance-scoring/relevance/proxy/backend/scorer"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, spec backend.Spec) (*fakenode.Node, *scorer.Backend) {
	t.Helper()
	n, err := fakenode.Start(fakenode.Options{Parallel: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	spec.Addr = n.Addr()
	b, err := scorer.New(spec)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	return n, b
}

func ctx(t *testing.T, d time.Duration) context.Context {
	c, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return c
}

func TestScoreBatch(t *testing.T) {
	_, b := start(t, backend.Spec{})
	req := conformance.Request(5)
	resp, err := b.ScoreBatch(ctx(t, 5*time.Second), req)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range resp.GetScores() {
		if s.GetIndex() != uint32(i) || s.GetId() != req.Items[i].Id || s.GetScore() != fakenode.Score(req.Query, req.Items[i].Text) {
			t.Errorf("scores[%d] = %v", i, s)
		}
	}
	if resp.GetStats() == nil || resp.GetLoad() == nil {
		t.Error("the node's BatchStats and NodeLoad did not pass through")
	}
}

// TestNodesItemLimitIsItsOwnNotTheCallers: a node's refusal of a batch over its max_items
// (INVALID_ARGUMENT with a BatchTooLarge) is the node's limit, as every kind says it:
// FailedPrecondition with the limit (backend.ItemLimit), naming the node.
func TestNodesItemLimitIsItsOwnNotTheCallers(t *testing.T) {
	n, err := fakenode.Start(fakenode.Options{MaxItems: 2})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(n.Close)
	b, err := scorer.New(backend.Spec{Addr: n.Addr()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = b.Close() })
	_, err = b.ScoreBatch(ctx(t, 5*time.Second), conformance.Request(3))
	if s := status.Convert(err); s.Code() != codes.FailedPrecondition || backend.ItemLimit(err) != 2 ||
		!strings.HasPrefix(s.Message(), "node scorer@"+n.Addr()+": too many items: 3, the limit is 2") {
		t.Errorf("error = %v (limit %d), want FailedPrecondition with the limit 2", err, backend.ItemLimit(err))
	}
}

func TestErrorsKeepTheirCodeAndNameTheNode(t *testing.T) {
	n, b := start(t, backend.Spec{})
	n.FailNext(1, codes.ResourceExhausted)
	_, err := b.ScoreBatch(ctx(t, 5*time.Second), conformance.Request(2))
	if s := status.Convert(err); s.Code() != codes.ResourceExhausted || !strings.HasPrefix(s.Message(), "node scorer@"+n.Addr()+": ") {
		t.Errorf("error = %v", err)
	}
	n.SetHang(true)
	c, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	_, err = b.ScoreBatch(c, conformance.Request(2))
	if status.Code(err) != codes.DeadlineExceeded {
		t.Errorf("hung node: %v, want DeadlineExceeded", err)
	}
	n.SetHang(false)
}

func TestHealth(t *testing.T) {
	n, b := start(t, backend.Spec{})
	if !b.Healthy(ctx(t, 5*time.Second)) {
		t.Error("serving node: Healthy() = false")
	}
	n.SetServing(false)
	if b.Healthy(ctx(t, 5*time.Second)) {
		t.Error("not-serving node: Healthy() = true")
	}
	n.Close()
	if b.Healthy(ctx(t, 2*time.Second)) {
		t.Error("closed node: Healthy() = true")
	}
}

// badNode answers with the scores a test gives it.
type badNode struct {
	relevancev1.UnimplementedScorerServer
	scores func(n int) []*relevancev1.ItemScore
}

func (s badNode) ScoreBatch(_ context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	return &relevancev1.ScoreBatchResponse{Scores: s.scores(len(req.GetItems()))}, nil
}

func TestReplyShape(t *testing.T) {
	for _, tc := range []struct {
		name   string
		scores func(n int) []*relevancev1.ItemScore
		want   string // "" for a reply that must be accepted
	}{
		{"reversed", func(n int) []*relevancev1.ItemScore {
			out := make([]*relevancev1.ItemScore, n)
			for i := range out {
				out[i] = &relevancev1.ItemScore{Index: uint32(n - 1 - i), Score: float32(n-1-i) / 10}
			}
			return out
		}, ""},
		{"out of range", func(int) []*relevancev1.ItemScore {
			return []*relevancev1.ItemScore{{Index: 9}, {Index: 1}, {Index: 2}}
		}, "scores[0].index 9 out of range for 3 items"},
		{"duplicate", func(int) []*relevancev1.ItemScore {
			return []*relevancev1.ItemScore{{Index: 0}, {Index: 0}, {Index: 2}}
		}, "scores[1].index 0 repeats scores[0].index"},
		{"too few", func(int) []*relevancev1.ItemScore { return []*relevancev1.ItemScore{{Index: 0}, {Index: 2}} }, "scores: 2 entries for 3 items (index 1 missing)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lis, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			srv := grpc.NewServer()
			relevancev1.RegisterScorerServer(srv, badNode{scores: tc.scores})
			go func() { _ = srv.Serve(lis) }()
			defer srv.Stop()
			conn, err := grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
			if err != nil {
				t.Fatal(err)
			}
			defer func() { _ = conn.Close() }()
			b := scorer.NewConn(conn, backend.Spec{Addr: lis.Addr().String()})
			resp, err := b.ScoreBatch(ctx(t, 5*time.Second), conformance.Request(3))
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				for i, s := range resp.GetScores() {
					if s.GetIndex() != uint32(i) || s.GetScore() != float32(i)/10 {
						t.Errorf("scores[%d] = %v, not in item order", i, s)
					}
				}
				return
			}
			if s := status.Convert(err); s.Code() != codes.Internal || s.Message() != "node scorer@"+lis.Addr().String()+": "+tc.want {
				t.Errorf("error = %v, want Internal %q", err, tc.want)
			}
			if !b.Healthy(ctx(t, 5*time.Second)) {
				t.Error("a node without the health service counts as healthy")
			}
			_ = b.Close() // NewConn: the connection stays the caller's
			if conn.GetState().String() == "SHUTDOWN" {
				t.Error("Close closed a connection it does not own")
			}
		})
	}
}
