package node

// Test script: in-process hooks for a test that runs the real node and steers it while it runs
// (internal/fakenode runs the real node around a scripted engine and uses them to fail calls,
// count them, report a phantom backlog, flip health and swap the model in place). Off by
// default: nothing but such a test calls SetScript, SetServing or SetEngine, and a node without a
// script has no hook beyond fault injection's.

import (
	healthpb "google.golang.org/grpc/health/grpc_health_v1"

	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
)

// Script is what a test hooks into a node. Nil fields do nothing.
type Script struct {
	// OnCall runs at the start of every ScoreBatch call that reaches the handler, before any
	// check; a non-nil error (a gRPC status) fails the call with it, as fault injection's
	// fail_next does (counted as reason "injected").
	OnCall func() error
	// OnBatch runs on every ScoreBatch call whose request passed the node's own checks (a batch
	// over max_items is refused for its size before it), with that request; a non-nil error (a
	// gRPC status) fails the call with it, counted as reason "injected". A test fails the calls
	// that hold particular items with it.
	OnBatch func(*pb.ScoreBatchRequest) error
	// ReportedLoad is seconds of phantom backlog added to the queued cost that every NodeLoad and
	// /v1/status report, as if other proxies had queued work here. It is reported as it is, NaN
	// or infinite included (a buggy node).
	ReportedLoad func() float64
}

// SetScript installs s. Call it after New and before Start. It turns on the scheduler's
// fault-injection hook (stall and slowdown stay off; without Config.FaultInjection there is
// still no /debug/fault route).
func (n *Node) SetScript(s Script) {
	if n.sched.fault == nil {
		n.sched.fault = newFaults(n.log)
	}
	n.sched.fault.script = s
}

// SetServing sets the node's grpc.health.v1 status (the whole server and relevance.v1.Scorer),
// as a test's script does to make a node look unhealthy while it still serves calls. The node's
// own transitions (loaded, draining, broken) set it again when they happen.
func (n *Node) SetServing(serving bool) {
	st := healthpb.HealthCheckResponse_NOT_SERVING
	if serving {
		st = healthpb.HealthCheckResponse_SERVING
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, svc := range []string{"", scorerService} {
		n.health.SetServingStatus(svc, st)
	}
}

// SetEngine makes later calls use eng, for their Info (the model and fingerprint their replies
// carry) and their tokenizing, as a test's script does to swap a node's model in place while it
// serves (a real node restarts for a new model). A call keeps the engine it started with, so its
// reply never mixes models. Passes still run on the engine the node loaded, which must therefore
// run eng's groups too (internal/fakenode's engines with another model do). Call it after the
// node has loaded.
func (n *Node) SetEngine(eng scorer.Engine) { n.engine.Store(&eng) }
