// Package fakenode runs in-process scorer nodes for tests and benchmarks: the real scorer/node
// server (its gRPC relevance.v1.Scorer and grpc.health.v1 services, scheduler, validation,
// deadline checks, cost model, BatchStats and NodeLoad) on 127.0.0.1:0, around ScriptedEngine,
// an engine with no model whose passes take the time a test scripts. So proxy tests exercise the
// node protocol as real nodes speak it.
//
// A node behaves like one single-device scorer: the node's scheduler runs one pass at a time,
// merging queued batches into one pass as a real node does; a batch takes the time its cost
// function gives (by default the shared cost formula, costmodel.Coeffs.Seconds of the batch's
// features, with token counts from a cheap counter), and a merged pass the sum of its batches'
// (Options.Parallel: the longest). BatchStats carry what the node measured: the pass's wall time
// (the scripted time plus the timer's lateness, a fraction of a millisecond; never 0, even on a
// zero-cost node), shared among a merged pass's batches by their tokens. The node starts its
// cost model from the scripted cost (see ScriptedEngine.CostPrior), so its deadline check
// refuses at once a batch that cannot finish in time, as a real node does, and it reports its
// learned model in NodeLoad. Scores are a deterministic function of (query, text) (see Score),
// so tests can check merging.
//
// Tests steer a node while it runs: SetCost / SetLatency (slow node: the node learns it from its
// passes), FailNext / SetFailing (failing node, any gRPC code), FailItems (the calls holding
// given items fail), SetHang (a stalled device: passes hold until their callers have gone),
// SetServing (health flips, seen by grpc.health.v1 Watch), SetReportedLoad (extra backlog in
// NodeLoad), SetModel / SetNamedModel (another model, swapped in place), and read Calls /
// Batches / Items. They go through the node's test hooks (node.Node.SetScript, SetServing,
// SetEngine). All methods are safe for concurrent use.
//
//	n, err := fakenode.Start(fakenode.Options{Coeffs: costmodel.Coeffs{A: 1e-5, C: 1e-3}})
//	defer n.Close()
//	n.FailNext(3, codes.Unavailable)
package fakenode

import (
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"sync"
	"sync/atomic"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/costmodel"
	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
	"github.com/relevance-scoring/relevance/scorer/node"
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
	// compute. Zero: no compute time.
	Coeffs costmodel.Coeffs
	// Latency, when set, replaces Coeffs: the batch's compute time.
	Latency func(Batch) time.Duration
	// Tokens counts a text's tokens. Nil: CountTokens (about 4 bytes per token).
	Tokens func(text string) int
	// PrefixTokens is the template's token count around instruction and query (0: 40).
	PrefixTokens int
	// TailTokens is the template tail added to every item (0: 12).
	TailTokens int
	// Parallel makes batches run side by side instead of one after another: the node merges
	// every queued batch into its next pass (no token budget), and a pass takes its longest
	// batch's time. A batch then waits at most for the pass already running.
	Parallel bool
	// MergeFill makes the node merge every queued batch that fits its token budget into its
	// next pass (merge_policy: fill), whether or not the merge pays by the cost model.
	MergeFill bool
	// ID is the node_id in replies (empty: the node's default, host name and port).
	ID string
	// Addr is the gRPC address to listen on (empty: 127.0.0.1:0, a free loopback port). The
	// node's HTTP port (/v1/status, /metrics) is always a free loopback port.
	Addr string
	// Fingerprint is the model fingerprint in replies (empty: none); SetModel changes it.
	Fingerprint string
	// MaxItems is the node's max_items, the most items one batch may hold (0: no limit a test
	// would meet); a larger batch is refused as a real node refuses it.
	MaxItems int
}

// Node is one running fake scorer node.
type Node struct {
	node   *node.Node
	engine *ScriptedEngine

	calls      atomic.Int64  // ScoreBatch calls received
	reportLoad atomic.Uint64 // math.Float64bits of SetReportedLoad's seconds

	mu       sync.Mutex
	failNext int
	failCode codes.Code
	failing  bool
	// failItem and failItemCode: FailItems.
	failItem     func(text string) bool
	failItemCode codes.Code

	closeOnce sync.Once
}

// Start starts a node and returns once it serves (engine loaded, health SERVING); it serves
// until Close.
func Start(opts Options) (*Node, error) {
	if err := opts.Coeffs.Validate(); err != nil {
		return nil, fmt.Errorf("fakenode: %w", err)
	}
	cfg := node.Default()
	cfg.GRPCAddr, cfg.HTTPAddr, cfg.NodeID = opts.Addr, "127.0.0.1:0", opts.ID
	if cfg.GRPCAddr == "" {
		cfg.GRPCAddr = "127.0.0.1:0"
	}
	cfg.Engine, cfg.Model = node.EngineReal, "fakenode"
	// Limits no test should meet (the old fake had none), and nothing that outlives a test or
	// reaches beyond the node: no drain wait on Close, no start-up calibration (the engine's
	// prior is its scripted cost), no process-wide memory limit.
	cfg.MaxItems, cfg.MaxItemBytes, cfg.MaxQueueBatches = 1<<20, 1<<24, 1<<20
	if opts.MaxItems > 0 {
		cfg.MaxItems = opts.MaxItems
	}
	cfg.PrefixCacheBytes, cfg.DrainTimeout, cfg.Calibrate, cfg.MemoryLimit = 0, 0, false, -1
	if opts.Parallel {
		cfg.MaxBatchTokens = math.MaxInt32
	}
	if opts.Parallel || opts.MergeFill {
		cfg.MergePolicy = node.MergeFill
	}
	n := &Node{engine: NewScriptedEngine(opts)}
	nd, err := node.New(cfg, func(context.Context) (scorer.Engine, error) { return n.engine, nil },
		node.Options{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return nil, fmt.Errorf("fakenode: %w", err)
	}
	nd.SetScript(node.Script{OnCall: n.onCall, OnBatch: n.onBatch, ReportedLoad: n.reportedLoad})
	if err := nd.Start(); err != nil {
		return nil, fmt.Errorf("fakenode: %w", err)
	}
	n.node = nd
	<-nd.Loaded()
	if err := nd.LoadErr(); err != nil {
		n.Close()
		return nil, fmt.Errorf("fakenode: %w", err)
	}
	return n, nil
}

// onCall counts a call and fails it when a failure is scripted.
func (n *Node) onCall() error {
	n.calls.Add(1)
	n.mu.Lock()
	defer n.mu.Unlock()
	if !n.failing && n.failNext == 0 {
		return nil
	}
	if n.failNext > 0 {
		n.failNext--
	}
	return status.Errorf(n.failCode, "fakenode %s: injected failure", n.Addr())
}

// onBatch fails a validated call that holds an item FailItems picks.
func (n *Node) onBatch(req *pb.ScoreBatchRequest) error {
	n.mu.Lock()
	pick, code := n.failItem, n.failItemCode
	n.mu.Unlock()
	if pick == nil {
		return nil
	}
	for i, it := range req.GetItems() {
		if pick(it.GetText()) {
			return status.Errorf(code, "fakenode %s: injected failure of items[%d]", n.Addr(), i)
		}
	}
	return nil
}

func (n *Node) reportedLoad() float64 { return math.Float64frombits(n.reportLoad.Load()) }

// Addr is the node's gRPC host:port.
func (n *Node) Addr() string { return n.node.GRPCAddr() }

// Close stops the node at once (in-flight calls fail) and is idempotent.
func (n *Node) Close() {
	n.closeOnce.Do(func() {
		n.SetHang(false)
		ctx, cancel := context.WithCancel(context.Background())
		cancel() // no drain: stop now
		_ = n.node.Shutdown(ctx)
	})
}

// SetModel swaps the node's "model" in place: replies to later calls carry fingerprint fp and
// every score they give is shifted by shift (clamped to (0, 1)), so that a test can tell which
// model scored an item. A call already started answers wholly with the model it started with.
func (n *Node) SetModel(fp string, shift float32) { n.node.SetEngine(n.engine.WithModel(fp, shift)) }

// SetNamedModel is SetModel with the model also renamed: replies to later calls carry name as
// their model ("": fakenode, the name a node starts with).
func (n *Node) SetNamedModel(name, fp string, shift float32) {
	n.node.SetEngine(n.engine.WithNamedModel(name, fp, shift))
}

// SetCost replaces the node's true cost coefficients (and clears any Latency function).
func (n *Node) SetCost(c costmodel.Coeffs) { n.engine.SetCost(c) }

// SetLatency replaces the compute-time function (nil: back to the cost coefficients).
func (n *Node) SetLatency(f func(Batch) time.Duration) { n.engine.SetLatency(f) }

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

// FailItems makes every call that holds an item whose text pick accepts fail at once with code,
// after the node's own checks (so a batch over MaxItems is still refused for its size first);
// nil pick: none fails so.
func (n *Node) FailItems(pick func(text string) bool, code codes.Code) {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.failItem, n.failItemCode = pick, code
}

// SetHang stalls the node's device (on): every pass holds until its callers have all gone (their
// contexts ended), and batches queue behind it. Off releases the held pass and lets later ones
// run normally.
func (n *Node) SetHang(on bool) { n.engine.SetHang(on) }

// SetServing flips the grpc.health.v1 status of the node (both the "" service and
// relevance.v1.Scorer). Calls are still served; only health watchers see the change.
func (n *Node) SetServing(serving bool) { n.node.SetServing(serving) }

// SetReportedLoad adds seconds of phantom backlog to every reply's NodeLoad.queued_cost_seconds
// (as if other proxies were sending work to this node). NaN and infinities are reported as they
// are.
func (n *Node) SetReportedLoad(seconds float64) { n.reportLoad.Store(math.Float64bits(seconds)) }

// Calls is the number of ScoreBatch calls received (failed, hung and cancelled ones included).
func (n *Node) Calls() int64 { return n.calls.Load() }

// Batches is the number of batches scored (by passes that completed).
func (n *Node) Batches() int64 { return n.engine.Batches() }

// Passes is the number of forward passes that completed: fewer than Batches where the node
// merged queued batches into one pass.
func (n *Node) Passes() int64 { return n.engine.Passes() }

// Items is the number of items scored (by passes that completed).
func (n *Node) Items() int64 { return n.engine.Items() }

// CountTokens is the fake nodes' default token counter: about one token per 4 bytes, at least
// one per non-empty text. Cheap and deterministic; not a tokenizer.
func CountTokens(text string) int {
	if text == "" {
		return 0
	}
	return (len(text) + 3) / 4
}

// Score is the deterministic score a fake node gives (query, text), bit for bit: a hash mapped
// into (0.001, 0.999), turned into a float32 logit (what the engine hands the node), and back
// into a score by the node's logistic function.
func Score(query, text string) float32 { return sigmoid(logit(query, text)) }

// logit is the engine's logit for (query, text), whose sigmoid is Score.
func logit(query, text string) float32 {
	h := fnv.New64a()
	h.Write([]byte(query))
	h.Write([]byte{0})
	h.Write([]byte(text))
	// 53 bits → (0, 1), away from the ends so the logit stays finite in float32.
	u := float64(h.Sum64()>>11) / float64(uint64(1)<<53)
	s := 0.001 + 0.998*u
	return float32(math.Log(s / (1 - s)))
}

// sigmoid is the score of a logit exactly as scorer/node computes it for its replies.
func sigmoid(l float32) float32 { return float32(1 / (1 + math.Exp(-float64(l)))) }

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
