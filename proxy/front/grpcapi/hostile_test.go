package grpcapi

import (
	"context"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/internal/rawh2"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestStalledRequestMessageIsCutOff: a Score call whose request message never finishes arriving
// (headers, then part of the message, then nothing, and no deadline of its own) is ended by the
// server within grpc.recv_timeout, and the core is never called. The mechanism is
// internal/grpcrecv's, tested there; this checks the front installs it from its config. Before
// it nothing bounded the wait, and the stream — with the bytes it buffered, up to
// max_recv_bytes — stayed until the client closed the connection.
func TestStalledRequestMessageIsCutOff(t *testing.T) {
	cfg := testConfig()
	cfg.RecvTimeout = 300 * time.Millisecond
	called := make(chan struct{}, 1)
	e := start(t, cfg, &fakeCore{fn: func(ctx context.Context, req *relevancev1.ScoreRequest) (*relevancev1.ScoreResponse, error) {
		called <- struct{}{}
		return echoScores(ctx, req)
	}})
	r := rawh2.Dial(t, e.conn.Target())
	r.Open(1, relevancev1.Ranker_Score_FullMethodName)
	r.SendPartial(1, 1000, 10) // a message of 1000 bytes announced, 10 sent
	f, took, ok := r.WaitEnd(1, 3*time.Second)
	if !ok {
		t.Fatalf("stream with a stalled request message still open after %s (recv_timeout 300ms)", took.Round(time.Millisecond))
	}
	t.Logf("stream ended after %s: trailers %v, RST_STREAM %v", took.Round(time.Millisecond), f.Ended, f.RST)
	if took > 2*time.Second {
		t.Errorf("stream ended after %s, want about recv_timeout (300ms)", took)
	}
	select {
	case <-called:
		t.Error("the core was called for a request that never arrived")
	default:
	}
}

// TestStreamsPerConnectionAreCapped: one connection cannot open more than
// grpc.max_concurrent_streams calls at once; a client that ignores the advertised limit has its
// extra streams refused (REFUSED_STREAM, which clients retry) instead of each holding a goroutine
// and buffers on the server. Before the fix there was no limit (grpc-go's default).
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	cfg := testConfig()
	cfg.MaxConcurrentStreams = 4
	e := start(t, cfg, &fakeCore{fn: echoScores})
	r := rawh2.Dial(t, e.conn.Target())
	const opened = 12
	for i := range opened {
		r.Open(uint32(2*i+1), relevancev1.Ranker_Score_FullMethodName)
	}
	want := opened - int(cfg.MaxConcurrentStreams)
	refused, advertised := r.Refused(want, 2*time.Second)
	if refused < want {
		t.Fatalf("%d of %d streams refused (advertised SETTINGS_MAX_CONCURRENT_STREAMS %d), want %d refused beyond the limit of %d",
			refused, opened, advertised, want, cfg.MaxConcurrentStreams)
	}
	if advertised != cfg.MaxConcurrentStreams {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want %d", advertised, cfg.MaxConcurrentStreams)
	}
}
