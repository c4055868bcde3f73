package grpcapi

import (
	"context"
	"net"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/keepalive"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestRequestIDMetadataReachesCoreAndIsEchoed: the HTTP front takes X-Request-Id in and always
// returns one; a gRPC caller's x-request-id metadata must reach the core and come back, on errors
// too.
func TestRequestIDMetadataReachesCoreAndIsEchoed(t *testing.T) {
	var seen string
	core := &fakeCore{fn: func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		seen = req.GetRequestId()
		return nil, status.Error(codes.Unavailable, "no healthy scorer node")
	}}
	e := start(t, testConfig(), core)
	ctx := metadata.AppendToOutgoingContext(ctxT(t), "x-request-id", "search-42")
	var hdr, trl metadata.MD
	_, err := relevancev1.NewRankerClient(e.conn).Score(ctx, &relevancev1.ScoreRequest{Query: "q"}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if status.Code(err) != codes.Unavailable {
		t.Fatalf("err = %v", err)
	}
	if seen != "search-42" {
		t.Errorf("core saw request_id %q, want the metadata's %q", seen, "search-42")
	}
	if got := append(hdr.Get("x-request-id"), trl.Get("x-request-id")...); len(got) == 0 || got[0] != "search-42" {
		t.Errorf("reply x-request-id = %v, want [search-42]", got)
	}
}

// TestErrorReplyCarriesARequestIDWhenCallerSentNone: a caller that sent no id still learns the one
// its failed call ran under.
func TestErrorReplyCarriesARequestIDWhenCallerSentNone(t *testing.T) {
	core := &fakeCore{fn: func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		return nil, status.Error(codes.DeadlineExceeded, "batch 1: deadline exceeded")
	}}
	e := start(t, testConfig(), core)
	var hdr, trl metadata.MD
	_, err := relevancev1.NewRankerClient(e.conn).Score(ctxT(t), &relevancev1.ScoreRequest{Query: "q"}, grpc.Header(&hdr), grpc.Trailer(&trl))
	if err == nil {
		t.Fatal("want an error")
	}
	if len(hdr.Get("x-request-id"))+len(trl.Get("x-request-id")) == 0 {
		t.Errorf("error reply has no x-request-id (header %v, trailer %v); the HTTP front always returns one", hdr, trl)
	}
}

// TestKeepalivePingingClientIsNotSentGoAway: a backend with a common keepalive (ping every 10 s,
// also while idle, grpc-go's minimum) must not be sent GOAWAY ENHANCE_YOUR_CALM "too_many_pings"
// (server default MinTime is 5 min). ~45 s.
func TestKeepalivePingingClientIsNotSentGoAway(t *testing.T) {
	if testing.Short() {
		t.Skip("45 s")
	}
	e := start(t, testConfig(), &fakeCore{fn: echoScores})
	addr := e.conn.Target()
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithKeepaliveParams(keepalive.ClientParameters{Time: 10 * time.Second, Timeout: 5 * time.Second, PermitWithoutStream: true}))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := relevancev1.NewRankerClient(conn).Score(ctxT(t), &relevancev1.ScoreRequest{Query: "q"}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if conn.WaitForStateChange(ctx, connectivity.Ready) {
		t.Errorf("connection left READY (now %v) after keepalive pings: the server sent GOAWAY too_many_pings", conn.GetState())
	}
	_ = net.IPv4len
}
