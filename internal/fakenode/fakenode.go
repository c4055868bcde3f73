// Package fakenode runs in-process fake scorer nodes for tests and benchmarks: a real gRPC server
// on 127.0.0.1:0 serving relevance.v1.Scorer/ScoreBatch and grpc.health.v1, with no model.
//
// A fake node behaves like one single-device scorer: batches run one at a time in arrival order
// (FIFO), each taking the time its cost function gives (by default the shared cost formula,
// costmodel.Coeffs.Seconds of the batch's features, with token counts from a cheap counter). Its
// replies carry BatchStats and NodeLoad like a real node's, so the proxy can learn from them.
// Scores are a deterministic function of (query, text) (see Score), so tests can check merging.
//
// Tests steer a node while it runs: SetCost / SetLatency (slow node), FailNext / SetFailing
// (failing node, any gRPC code), SetHang (a node that never answers until the call's deadline),
// SetServing (health flips, seen by grpc.health.v1 Watch), SetReportedLoad (extra backlog in
// NodeLoad), and read Calls / Batches. All methods are safe for concurrent use.
//
//	n, err := fakenode.Start(fakenode.Options{Coeffs: costmodel.Coeffs{A: 1e-5, C: 1e-3}})
//	defer n.Close()
//	n.FailNext(3, codes.Unavailable)
package fakenode

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"net"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/health"
	healthpb "google.golang.org/grpc/health/grpc_health_v1"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Batch is what a cost or latency function sees of one incoming batch.
type Batch struct {
	Query        string
	PrefixTokens int
	ItemTokens   []int // per item, as counted by Options.Tokens (plus TailTokens)
}

// Options configures a fake node. The zero value is a zero-latency node that always succeeds.
type Options struct {
	// Coeffs is the node's true cost: each batch takes Coeffs.Seconds(BatchFeatures(...)) of
	// compute (scaled by Scale). Zero: no compute time.
	Coeffs costmodel.Coeffs
	// Latency, when set, replaces Coeffs: the batch's compute time.
	Latency func(Batch) time.Duration
	// Tokens counts a text's tokens. Nil: CountTokens (about 4 bytes per token).
	Tokens func(text string) int
	// PrefixTokens is the template's token count around instruction and query (0: 40).
	PrefixTokens int
	// TailTokens is the template tail added to every item (0: 12).
	TailTokens int
	// Parallel lets batches run concurrently instead of one at a time (a node with no queue).
	Parallel bool
	// ID is the node_id in replies (empty: the listen address).
	ID string
	// Addr is the address to listen on (empty: 127.0.0.1:0, a free loopback port).
	Addr string
	// Fingerprint is the model fingerprint in replies (empty: none); SetModel changes it.
	Fingerprint string
}

// Node is one running fake scorer node.
type Node struct {
	relevancev1.UnimplementedScorerServer

	opts   Options
	lis    net.Listener
	srv    *grpc.Server
	health *health.Server
	addr   string

	mu          sync.Mutex
	latency     func(Batch) time.Duration
	coeffs      costmodel.Coeffs
	failNext    int
	failCode    codes.Code
	failing     bool
	hang        bool
	extraLoad   float64
	fingerprint string
	scoreShift  float32 // added to every score: a "different model" (SetModel)
	queuedCost  float64 // seconds of work admitted but not finished (FIFO backlog + running)
	queued      int
	inflight    int
	serial      chan struct{} // one token: the "device"
	hangRelease chan struct{} // closed by SetHang(false) to free hung calls

	calls   atomic.Int64 // ScoreBatch calls received
	batches atomic.Int64 // batches answered successfully
	items   atomic.Int64
	closed  atomic.Bool
}

// Start listens on 127.0.0.1:0 and serves until Close.
func Start(opts Options) (*Node, error) {
	if err := opts.Coeffs.Validate(); err != nil {
		return nil, fmt.Errorf("fakenode: %w", err)
	}
	if opts.Tokens == nil {
		opts.Tokens = CountTokens
	}
	if opts.PrefixTokens <= 0 {
		opts.PrefixTokens = 40
	}
	if opts.TailTokens <= 0 {
		opts.TailTokens = 12
	}
	if opts.Addr == "" {
		opts.Addr = "127.0.0.1:0"
	}
	lis, err := net.Listen("tcp", opts.Addr)
	if err != nil {
		return nil, fmt.Errorf("fakenode: listen: %w", err)
	}
	n := &Node{
		opts:        opts,
		lis:         lis,
		srv:         grpc.NewServer(),
		health:      health.NewServer(),
		addr:        lis.Addr().String(),
		latency:     opts.Latency,
		coeffs:      opts.Coeffs,
		fingerprint: opts.Fingerprint,
		serial:      make(chan struct{}, 1),
		hangRelease: make(chan struct{}),
	}
	if n.opts.ID == "" {
		n.opts.ID = n.addr
	}
	relevancev1.RegisterScorerServer(n.srv, n)
	healthpb.RegisterHealthServer(n.srv, n.health)
	n.health.SetServingStatus("", healthpb.HealthCheckResponse_SERVING)
	n.health.SetServingStatus(relevancev1.Scorer_ServiceDesc.ServiceName, healthpb.HealthCheckResponse_SERVING)
	go func() { _ = n.srv.Serve(lis) }()
	return n, nil
}

// Addr is the node's host:port.
func (n *Node) Addr() string { return n.addr }

// Close stops the server at once (in-flight calls fail) and is idempotent.
func (n *Node) Close() {
	if n.closed.Swap(true) {
		return
	}
	n.health.Shutdown()
	n.SetHang(false)
	n.srv.Stop()
}

// SetModel swaps the node's "model": replies carry fingerprint fp and every score is shifted by
// shift (clamped to (0, 1)), so that a test can tell which model scored an item.
func (n *Node) SetModel(fp string, shift float32) {
	n.mu.Lock()
	n.fingerprint, n.scoreShift = fp, shift
	n.mu.Unlock()
}

// SetCost replaces the node's true cost coefficients (and clears any Latency function).
func (n *Node) SetCost(c costmodel.Coeffs) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.coeffs, n.latency = c, nil
}

// SetLatency replaces the compute-time function (nil: back to the cost coefficients).
func (n *Node) SetLatency(f func(Batch) time.Duration) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.latency = f
}

// FailNext makes the next k calls fail at once with code (and a message saying so).
func (n *Node) FailNext(k int, code codes.Code) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failNext, n.failCode = k, code
}

// SetFailing makes every call fail with code until SetFailing(false, …) is called.
func (n *Node) SetFailing(on bool, code codes.Code) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failing, n.failCode = on, code
}

// SetHang makes calls block until their context ends (on) or releases every hung call and
// lets new calls run normally (off).
func (n *Node) SetHang(on bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if on == n.hang {
		return
	}
	n.hang = on
	if !on {
		close(n.hangRelease)
		n.hangRelease = make(chan struct{})
	}
}

// SetServing flips the grpc.health.v1 status of the node (both the "" service and
// relevance.v1.Scorer). Calls are still served; only health watchers see the change.
func (n *Node) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	n.health.SetServingStatus("", st)
	n.health.SetServingStatus(relevancev1.Scorer_ServiceDesc.ServiceName, st)
}

// SetReportedLoad adds seconds of phantom backlog to every reply's NodeLoad.queued_cost_seconds
// (as if other proxies were sending work to this node).
func (n *Node) SetReportedLoad(seconds float64) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.extraLoad = seconds
}

// Calls is the number of ScoreBatch calls received (failed, hung and cancelled ones included).
func (n *Node) Calls() int64 { return n.calls.Load() }

// Batches is the number of batches answered successfully.
func (n *Node) Batches() int64 { return n.batches.Load() }

// Items is the number of items scored successfully.
func (n *Node) Items() int64 { return n.items.Load() }

// CountTokens is the fake nodes' default token counter: about one token per 4 bytes, at least
// one per non-empty text. Cheap and deterministic; not a tokenizer.
func CountTokens(text string) int {
	if text == "" {
		return 0
	}
	return (len(text) + 3) / 4
}

// Score is the deterministic score a fake node gives (query, text): a hash mapped into (0, 1).
func Score(query, text string) float32 {
	h := fnv.New64a()
	h.Write([]byte(query))
	h.Write([]byte{0})
	h.Write([]byte(text))
	// 53 bits → (0, 1), away from the ends so the logit stays finite in float32.
	u := float64(h.Sum64()>>11) / float64(uint64(1)<<53)
	return float32(0.001 + 0.998*u)
}

// ScoreBatch implements relevancev1.ScorerServer.
func (n *Node) ScoreBatch(ctx context.Context, req *relevancev1.ScoreBatchRequest) (*relevancev1.ScoreBatchResponse, error) {
	n.calls.Add(1)
	if len(req.GetItems()) == 0 {
		return nil, status.Error(codes.InvalidArgument, "items: empty batch")
	}
	b := Batch{
		Query:        req.GetQuery(),
		PrefixTokens: n.opts.PrefixTokens + n.opts.Tokens(req.GetInstruction()) + n.opts.Tokens(req.GetQuery()),
		ItemTokens:   make([]int, len(req.GetItems())),
	}
	for i, it := range req.GetItems() {
		b.ItemTokens[i] = n.opts.Tokens(it.GetText()) + n.opts.TailTokens
	}

	n.mu.Lock()
	if n.failing || n.failNext > 0 {
		if n.failNext > 0 {
			n.failNext--
		}
		code := n.failCode
		n.mu.Unlock()
		return nil, status.Errorf(code, "fakenode %s: injected failure", n.addr)
	}
	hang, release := n.hang, n.hangRelease
	var compute time.Duration
	if n.latency != nil {
		compute = n.latency(b)
	} else {
		compute = secondsToDuration(n.coeffs.Seconds(costmodel.BatchFeatures(b.PrefixTokens, b.ItemTokens, false)))
	}
	if compute < 0 {
		compute = 0
	}
	n.queuedCost += compute.Seconds()
	n.queued++
	n.mu.Unlock()

	start := time.Now()
	done := func() {
		n.mu.Lock()
		n.queuedCost -= compute.Seconds()
		n.mu.Unlock()
	}
	if hang {
		select {
		case <-ctx.Done():
			n.mu.Lock()
			n.queued--
			n.mu.Unlock()
			done()
			return nil, status.FromContextError(ctx.Err()).Err()
		case <-release:
		}
	}
	// Wait for the device (FIFO enough for tests: Go channels wake waiters in order).
	if !n.opts.Parallel {
		select {
		case n.serial <- struct{}{}:
		case <-ctx.Done():
			n.mu.Lock()
			n.queued--
			n.mu.Unlock()
			done()
			return nil, status.FromContextError(ctx.Err()).Err()
		}
	}
	queueWait := time.Since(start)
	n.mu.Lock()
	n.queued--
	n.inflight++
	n.mu.Unlock()
	err := sleepCtx(ctx, compute)
	if !n.opts.Parallel {
		<-n.serial
	}
	n.mu.Lock()
	n.inflight--
	n.mu.Unlock()
	done()
	if err != nil {
		return nil, status.FromContextError(err).Err()
	}

	n.mu.Lock()
	fingerprint, shift := n.fingerprint, n.scoreShift
	n.mu.Unlock()
	resp := &relevancev1.ScoreBatchResponse{
		Scores:           make([]*relevancev1.ItemScore, len(req.GetItems())),
		NodeId:           n.opts.ID,
		Model:            "fakenode",
		ModelFingerprint: fingerprint,
		Usage:            &relevancev1.Usage{PrefixTokens: uint64(b.PrefixTokens)},
		Stats:            &relevancev1.BatchStats{QueueSeconds: queueWait.Seconds(), ComputeSeconds: compute.Seconds(), PrefixTokens: uint32(b.PrefixTokens), MergedBatches: 1, ForwardSeconds: compute.Seconds()},
		Emulated:         true,
	}
	for i, it := range req.GetItems() {
		s := min(max(Score(req.GetQuery(), it.GetText())+shift, 1e-6), 1-1e-6)
		resp.Scores[i] = &relevancev1.ItemScore{
			Index:  uint32(i),
			Id:     it.GetId(),
			Score:  s,
			Logit:  float32(math.Log(float64(s) / (1 - float64(s)))),
			Status: relevancev1.ItemStatus_ITEM_STATUS_OK,
			Tokens: uint32(b.ItemTokens[i]),
		}
		resp.Usage.ItemTokens += uint64(b.ItemTokens[i])
		resp.Usage.PromptTokens += uint64(b.PrefixTokens + b.ItemTokens[i])
	}
	resp.Stats.ItemTokens = resp.Usage.ItemTokens
	resp.Stats.ForwardTokens = resp.Usage.ItemTokens + uint64(b.PrefixTokens)
	n.mu.Lock()
	resp.Load = &relevancev1.NodeLoad{
		QueuedCostSeconds: math.Max(0, n.queuedCost) + n.extraLoad,
		QueuedBatches:     uint32(n.queued),
		InflightBatches:   uint32(n.inflight),
	}
	n.mu.Unlock()
	n.batches.Add(1)
	n.items.Add(int64(len(req.GetItems())))
	return resp, nil
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return ctx.Err()
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func secondsToDuration(s float64) time.Duration {
	if !(s > 0) {
		return 0
	}
	return time.Duration(s * float64(time.Second))
}

// Cluster is a set of fake nodes started together.
type Cluster []*Node

// StartCluster starts n nodes with the same options (IDs node0, node1, …).
func StartCluster(n int, opts Options) (Cluster, error) {
	var c Cluster
	for i := range n {
		o := opts
		o.ID = fmt.Sprintf("node%d", i)
		nd, err := Start(o)
		if err != nil {
			c.Close()
			return nil, err
		}
		c = append(c, nd)
	}
	return c, nil
}

// Addrs lists the nodes' host:port in order.
func (c Cluster) Addrs() []string {
	out := make([]string, len(c))
	for i, n := range c {
		out[i] = n.Addr()
	}
	return out
}

// Close stops every node.
func (c Cluster) Close() {
	for _, n := range c {
		n.Close()
	}
}
