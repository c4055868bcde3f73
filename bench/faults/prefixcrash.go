package faults

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"path/filepath"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/bench/workload"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// A score is compared bit for bit with its reference: the scorer promises one score per (model,
// prompt) whatever computed it — prefix cached or not, template KV or not, any batch, merged pass
// or thread count (kernels package doc; issue 14) — so any difference is either a dirty prefix
// read or a broken promise, and both are failures.

// nodeCacheHits sums the nodes' prefix-cache hits from /v1/status (0 when it has no cache).
func (e *env) nodeCacheHits(ctx context.Context) int64 {
	var total int64
	for _, nd := range e.c.Nodes() {
		b, err := e.get(ctx, "http://"+nd.HTTPAddr+"/v1/status")
		if err != nil {
			continue
		}
		var st struct {
			PrefixCache *struct {
				Hits int64 `json:"hits"`
			} `json:"prefix_cache"`
		}
		if json.Unmarshal(b, &st) == nil && st.PrefixCache != nil {
			total += st.PrefixCache.Hits
		}
	}
	return total
}

// nodeInflight reads a node's in-flight batches from /v1/status.
func (e *env) nodeInflight(ctx context.Context, i int) int {
	b, err := e.get(ctx, "http://"+e.node(i).HTTPAddr+"/v1/status")
	if err != nil {
		return 0
	}
	var st struct {
		InflightBatches int `json:"inflight_batches"`
	}
	_ = json.Unmarshal(b, &st)
	return st.InflightBatches
}

// runPrefixCrash checks that no request ever reads prefix KV that a failed pass left: reference
// scores first (each request alone), then a storm of requests over the same few queries with
// deadlines short enough to cancel passes mid-way, one node SIGKILLed while it runs a batch, and
// the reference requests again, on every node's cache: any score that moved is a dirty read.
func runPrefixCrash(ctx context.Context, e *env, r *Result) error {
	if !e.o.Cluster.Emulated() {
		return prefixCrash(ctx, e, r)
	}
	n := e.o.PrefixCrashRealNodes
	if n <= 0 {
		r.skip("needs real nodes (--engine real, or --prefix-crash-nodes > 0): an emulated node's scores do not depend on prefix KV, so a dirty read cannot show")
		return nil
	}
	side, err := e.realSide(ctx, n, "prefix-crash")
	if err != nil {
		return err
	}
	defer side.stop()
	m := side.o.Cluster.Model
	r.Details = append(r.Details, fmt.Sprintf("on a cluster of its own: %d REAL nodes (%s, %s preset, %d thread(s) each) and a proxy, beside the emulated cluster",
		n, m.Arch, m.Preset, side.o.Cluster.Nodes.Threads))
	return prefixCrash(ctx, side, r)
}

// realSide starts a cluster of n real nodes beside an emulated one, with the same options but
// the real engine (the cluster config's model, threads and calibration cache), its own proxy,
// supervisor and log folder: for a scenario that needs the model's arithmetic. The caller stops
// it.
func (e *env) realSide(ctx context.Context, n int, name string) (*env, error) {
	o := e.o
	o.Cluster.Nodes.Engine, o.Cluster.Nodes.CostProfile, o.Cluster.Nodes.Count = "real", "", n
	o.Cluster.Nodes.Kind = cluster.KindScorer
	o.Cluster.LogDir = filepath.Join(o.Cluster.LogDir, name)
	side := &env{o: o, d: e.d, log: e.log, seed: e.nextSeed(), client: e.client}
	if err := side.start(ctx); err != nil {
		side.stop()
		return nil, fmt.Errorf("real nodes for %s: %w", name, err)
	}
	if err := side.waitAllHealthy(ctx, e.d.back); err != nil {
		side.stop()
		return nil, fmt.Errorf("real nodes for %s: %w", name, err)
	}
	return side, nil
}

// prefixCrash is runPrefixCrash on a cluster of real nodes.
func prefixCrash(ctx context.Context, e *env, r *Result) error {
	conn, err := grpc.NewClient(e.pcfg.GRPCAddr, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	client := relevancev1.NewRankerClient(conn)
	rng := rand.New(rand.NewPCG(e.nextSeed(), 1))
	queries := []string{"wireless noise cancelling earbuds", "stainless steel water bottle", "usb-c gan charger 65 w", "trail running shoes"}
	build := func(q string, n int) *relevancev1.ScoreRequest {
		req := &relevancev1.ScoreRequest{Query: q, Options: &relevancev1.ScoreOptions{NoCache: true}}
		for range n {
			req.Items = append(req.Items, &relevancev1.Item{Text: workload.Item(rng, 12+rng.IntN(24), false)})
		}
		return req
	}
	var refs []*relevancev1.ScoreRequest
	for _, q := range queries {
		refs = append(refs, build(q, 3))
	}
	score := func(ctx context.Context, req *relevancev1.ScoreRequest, d time.Duration) ([]float32, error) {
		cctx, cancel := context.WithTimeout(ctx, d)
		defer cancel()
		resp, err := client.Score(cctx, req)
		if err != nil {
			return nil, err
		}
		out := make([]float32, len(resp.GetScores()))
		for i, s := range resp.GetScores() {
			out[i] = s.GetScore()
		}
		return out, nil
	}
	want := make([][]float32, len(refs))
	for i, req := range refs {
		if want[i], err = score(ctx, req, 60*time.Second); err != nil {
			return fmt.Errorf("reference request %d: %w", i, err)
		}
	}

	// The storm: the same queries (so their prefixes are cached, computed and cancelled over and
	// over), three in four callers cancelling after 5–300 ms.
	storm := e.d.short
	var sent, cancelled, rejected, failed atomic.Int64
	sctx, stopStorm := context.WithTimeout(ctx, storm)
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			wr := rand.New(rand.NewPCG(uint64(w), 9))
			for sctx.Err() == nil {
				req := refs[wr.IntN(len(refs))]
				if wr.IntN(2) == 0 {
					req = &relevancev1.ScoreRequest{Query: req.Query, Items: req.Items[:1+wr.IntN(len(req.Items))], Options: req.Options}
				}
				// A 3 s budget gets the request admitted; most callers then give up after 5–300 ms,
				// mid-pass, the way a search backend cancels once it has enough results.
				rctx, cancel := context.WithCancel(sctx)
				var t *time.Timer
				if wr.IntN(4) != 0 {
					t = time.AfterFunc(time.Duration(5+wr.IntN(295))*time.Millisecond, cancel)
				}
				sent.Add(1)
				_, err := score(rctx, req, 3*time.Second)
				if t != nil {
					t.Stop()
				}
				cancel()
				if err != nil {
					switch status.Code(err) {
					case codes.DeadlineExceeded, codes.Canceled:
						cancelled.Add(1)
					case codes.ResourceExhausted: // refused at the door: back off, no pass was cut
						rejected.Add(1)
						sleep(sctx, 50*time.Millisecond)
					default:
						failed.Add(1)
					}
				}
			}
		})
	}
	// Kill a node while it runs a batch.
	i := e.pick(5)
	nd := e.node(i)
	sleep(ctx, storm/3)
	midBatch := 0.0
	deadline := time.Now().Add(storm / 2)
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if e.nodeInflight(ctx, i) > 0 {
			midBatch = 1
			break
		}
		sleep(ctx, 5*time.Millisecond)
	}
	if err := syscall.Kill(nd.Pid(), syscall.SIGKILL); err != nil {
		stopStorm()
		wg.Wait()
		return fmt.Errorf("SIGKILL %s: %w", nd.Name, err)
	}
	e.logf("SIGKILL %s (pid %d) mid-batch=%v", nd.Name, nd.Pid(), midBatch == 1)
	wg.Wait()
	stopStorm()
	if err := e.waitRestarted(ctx, i, nd.Proc); err != nil {
		return err
	}
	hits0 := e.nodeCacheHits(ctx)

	// The check: every reference request again, several times (so it lands on every node and
	// reads the prefixes the storm left in their caches).
	dirty, checked := 0, 0
	for round := range 2 * len(e.c.Nodes()) {
		for k, req := range refs {
			got, err := score(ctx, req, 60*time.Second)
			if err != nil {
				return fmt.Errorf("check request %d round %d: %w", k, round, err)
			}
			for j := range got {
				checked++
				if math.Float32bits(got[j]) != math.Float32bits(want[k][j]) {
					dirty++
					if dirty <= 10 {
						r.Details = append(r.Details, fmt.Sprintf("dirty: query %q item %d score %.9g, reference %.9g", req.Query, j, got[j], want[k][j]))
					}
				}
			}
		}
	}
	hits := e.nodeCacheHits(ctx) - hits0
	r.add("storm_requests", float64(sent.Load()), "req")
	r.add("storm_cancelled", float64(cancelled.Load()), "req")
	r.add("storm_rejected", float64(rejected.Load()), "req")
	r.add("storm_failed", float64(failed.Load()), "req")
	r.add("killed_mid_batch", midBatch, "")
	r.add("prefix_cache_hits", float64(max(hits, 0)), "")
	r.add("checked_scores", float64(checked), "")
	r.add("dirty_reads", float64(dirty), "")
	r.require("dirty_reads", "==", 0)
	r.require("killed_mid_batch", "==", 1)
	r.require("prefix_cache_hits", ">=", 1)
	r.Details = append(r.Details, fmt.Sprintf("%s SIGKILLed during the storm; scores compared bit for bit", nd.Name))
	return nil
}
