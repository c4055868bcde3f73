package node

import (
	"strings"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/internal/rawh2"
	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// TestStalledScoreBatchIsCutOff: a ScoreBatch whose request message never finishes arriving
// (headers, then part of the message, then nothing, and no deadline) is ended by the node within
// recv_timeout, and no work is spent on it. (The mechanism is internal/grpcrecv's, tested there;
// this checks the node installs it from its config.) Before, nothing bounded the wait: the
// stream and the bytes it had sent, up to the node's receive limit (~68 MiB at the defaults),
// stayed until the client closed the connection.
func TestStalledScoreBatchIsCutOff(t *testing.T) {
	cfg := testConfig()
	cfg.RecvTimeout = 300 * time.Millisecond
	f := newFake()
	h := start(t, cfg, loadEngine(f), true)
	r := rawh2.Dial(t, h.n.GRPCAddr())
	r.Open(1, pb.Scorer_ScoreBatch_FullMethodName)
	r.SendPartial(1, 1000, 10) // a message of 1000 bytes announced, 10 sent
	fr, took, ok := r.WaitEnd(1, 3*time.Second)
	if !ok {
		t.Fatalf("ScoreBatch with a stalled request message still open after %s (recv_timeout %s)", took.Round(time.Millisecond), cfg.RecvTimeout)
	}
	t.Logf("stream ended after %s: trailers %v, RST_STREAM %v", took.Round(time.Millisecond), fr.Ended, fr.RST)
	if took > 2*time.Second {
		t.Errorf("stream ended after %s, want about recv_timeout (%s)", took, cfg.RecvTimeout)
	}
	if l := h.n.sched.load(); l.QueuedBatches != 0 || l.InflightBatches != 0 {
		t.Errorf("scheduler holds work for a request that never arrived: %+v", l)
	}
}

// TestStreamsPerConnectionAreCapped: one connection cannot open more than
// max_concurrent_streams calls at once; a client that ignores the advertised limit has its
// extra streams refused (REFUSED_STREAM) instead of each holding a goroutine and buffers on the
// node. Before, there was no limit (grpc-go's default).
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	cfg := testConfig()
	// The smallest limit the config allows: max_queue_batches + max_batch_tokens/32 + 64.
	cfg.MaxQueueBatches, cfg.MaxBatchTokens = 1, 32
	cfg.MaxConcurrentStreams = cfg.neededStreams()
	h := start(t, cfg, loadEngine(newFake()), true)
	r := rawh2.Dial(t, h.n.GRPCAddr())
	limit := int(cfg.MaxConcurrentStreams)
	opened := limit + 12
	for i := range opened {
		r.Open(uint32(2*i+1), pb.Scorer_ScoreBatch_FullMethodName)
	}
	want := opened - limit
	refused, advertised := r.Refused(want, 3*time.Second)
	if refused < want {
		t.Fatalf("%d of %d streams refused (advertised SETTINGS_MAX_CONCURRENT_STREAMS %d), want %d refused beyond the limit of %d",
			refused, opened, advertised, want, limit)
	}
	if advertised != uint32(limit) {
		t.Errorf("SETTINGS_MAX_CONCURRENT_STREAMS = %d, want %d", advertised, limit)
	}
}

// TestMaxConcurrentStreamsConfig: 0 derives the limit from the queue and the pass (576 at the
// defaults), -1 is none, and a number set below the derived one is refused, naming it.
func TestMaxConcurrentStreamsConfig(t *testing.T) {
	cfg := testConfig()
	if got := cfg.maxConcurrentStreams(); got != 576 {
		t.Errorf("derived limit at the defaults = %d, want 256 + 8192/32 + 64 = 576", got)
	}
	cfg.MaxQueueBatches, cfg.MaxBatchTokens = 1000, 65536
	if got := cfg.maxConcurrentStreams(); got != 1000+2048+64 {
		t.Errorf("derived limit = %d, want %d", got, 1000+2048+64)
	}
	cfg.MaxConcurrentStreams = -1
	if got := cfg.maxConcurrentStreams(); got != 0 {
		t.Errorf("max_concurrent_streams -1 gives a limit of %d, want none (0)", got)
	}
	for _, tt := range []struct {
		v    int64
		want string
	}{
		{-1, ""}, {0, ""}, {3112, ""}, {1 << 20, ""},
		{3111, "max_concurrent_streams: must be 0 (derived: 3112), -1 (no limit) or ≥ 3112"},
		{-2, "max_concurrent_streams: must be ≥ -1, got -2"},
		{1 << 32, "max_concurrent_streams: must be ≤ 4294967295"},
	} {
		cfg.MaxConcurrentStreams = tt.v
		err := cfg.Validate()
		switch {
		case tt.want == "" && err != nil:
			t.Errorf("max_concurrent_streams %d: %v", tt.v, err)
		case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
			t.Errorf("max_concurrent_streams %d: err = %v, want it to contain %q", tt.v, err, tt.want)
		}
	}
}
