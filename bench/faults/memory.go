package faults

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/relevance-scoring/relevance/bench/cluster"
)

// readRSS returns a process's resident set size in bytes (VmRSS of /proc/PID/status).
func readRSS(pid int) (int64, error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if rest, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			fields := strings.Fields(rest)
			if len(fields) < 1 {
				break
			}
			kb, err := strconv.ParseInt(fields[0], 10, 64)
			if err != nil {
				return 0, fmt.Errorf("VmRSS of pid %d: %w", pid, err)
			}
			return kb << 10, nil
		}
	}
	return 0, fmt.Errorf("no VmRSS in /proc/%d/status", pid)
}

// rssSeries is one process's samples: start, peak, end.
type rssSeries struct {
	pid               int
	start, peak, end  int64
	samples, restarts int
	all               []int64 // every sample of the current process
}

func (s *rssSeries) add(pid int, v int64) {
	if s.samples == 0 || pid != s.pid {
		if s.samples > 0 {
			s.restarts++ // a new process: its growth counts from its own start
		}
		s.pid, s.start, s.peak, s.all = pid, v, v, nil
	}
	s.all = append(s.all, v)
	s.samples++
	s.peak = max(s.peak, v)
	s.end = v
}

func (s *rssSeries) growth() int64 { return s.peak - s.start }

// lateGrowth is the growth over the second half of the samples: near 0 once the process has
// levelled off, about half its growth when it grows steadily.
func (s *rssSeries) lateGrowth() int64 {
	if len(s.all) < 2 {
		return 0
	}
	return s.end - s.all[len(s.all)/2]
}

func mb(b int64) float64 { return float64(b) / (1 << 20) }

func runMemory(ctx context.Context, e *env, r *Result) error {
	spec := e.o.Workload
	spec.RepeatQueryShare = 0 // every request its own query: a fresh prefix for every cache
	nodes := make([]rssSeries, len(e.c.Nodes()))
	var proxy rssSeries
	var mu sync.Mutex
	sample := func() {
		mu.Lock()
		defer mu.Unlock()
		for i, nd := range e.c.Nodes() {
			if v, err := readRSS(nd.Pid()); err == nil {
				nodes[i].add(nd.Pid(), v)
			}
		}
		if p := e.proxyProc(); p != nil {
			if v, err := readRSS(p.Pid()); err == nil {
				proxy.add(p.Pid(), v)
			}
		}
	}
	sample() // idle: the start of every series
	// What each node's prefix cache already holds is in its first sample: only the rest of the
	// budget may still show as growth (nodeGrowthBound).
	cachedAtStart := make([]int64, len(nodes))
	for i, nd := range e.c.Nodes() {
		if i < len(cachedAtStart) {
			cachedAtStart[i], _, _, _ = e.nodePrefixCache(ctx, nd)
		}
	}
	rec := &recorder{}
	defer rec.close()
	t0 := time.Now()
	lr, err := e.startLoad(ctx, rec, 0.5, e.d.memory, false, false, spec)
	if err != nil {
		return err
	}
	tick := time.NewTicker(time.Second)
	for done := false; !done; {
		select {
		case <-lr.done:
			done = true
		case <-tick.C:
			sample()
		}
	}
	tick.Stop()
	if err := lr.wait(); err != nil {
		return err
	}
	sample()
	calls := between(rec.snapshot(), t0.Add(e.d.warmup), t0.Add(e.d.memory))
	r.Summary = summarize(calls, e.o.SLO, nil)
	r.HasLoad = true
	r.RateRPS = 0.5 * e.capacity

	proxyBound := e.o.RSSMargin + e.o.ProxyCacheBytes
	var start, peak, end, late int64
	restarts := 0
	bounds := make([]int64, len(nodes))
	for i, s := range nodes {
		restarts += s.restarts
		start, peak, end = max(start, s.start), max(peak, s.peak), max(end, s.end)
		late = max(late, s.lateGrowth())
		bounds[i] = nodeGrowthBound(e.o.Cluster.Emulated(), e.o.RSSMargin, e.o.NodeCacheBytes, cachedAtStart[i])
		if s.restarts > 0 {
			r.Details = append(r.Details, fmt.Sprintf("%s restarted during the run; its growth counts from the new process", e.c.Nodes()[i].Name))
		}
	}
	// The node judged is the one whose growth exceeds its own bound the most.
	w := worstNodeGrowth(nodes, bounds)
	growth, nodeBound, worst := int64(0), e.o.RSSMargin, ""
	if w >= 0 {
		growth, nodeBound, worst = nodes[w].growth(), bounds[w], e.c.Nodes()[w].Name
	}
	r.add("distinct_queries", float64(len(calls)), "")
	r.add("node_rss_start_mb", mb(start), "MB")
	r.add("node_rss_peak_mb", mb(peak), "MB")
	r.add("node_rss_end_mb", mb(end), "MB")
	r.add("node_growth_mb", mb(growth), "MB")
	r.add("node_growth_second_half_mb", mb(late), "MB")
	r.add("node_growth_bound_mb", mb(nodeBound), "MB")
	if b, budget, ev, ok := e.prefixCaches(ctx); ok {
		r.add("node_prefix_cache_mb", mb(b), "MB")
		r.add("node_prefix_cache_budget_mb", mb(budget), "MB")
		r.add("node_prefix_cache_evictions", float64(ev), "")
	}
	r.add("proxy_rss_start_mb", mb(proxy.start), "MB")
	r.add("proxy_rss_peak_mb", mb(proxy.peak), "MB")
	r.add("proxy_rss_end_mb", mb(proxy.end), "MB")
	r.add("proxy_growth_mb", mb(proxy.growth()), "MB")
	r.add("proxy_growth_second_half_mb", mb(proxy.lateGrowth()), "MB")
	r.add("proxy_growth_bound_mb", mb(proxyBound), "MB")
	// A node that restarted (it crashed, or was killed for memory) is judged on its new process
	// only: its growth would be forgotten, so a restart fails the scenario itself.
	r.add("node_restarts", float64(restarts), "")
	r.require("node_restarts", "==", 0)
	r.require("node_growth_mb", "<=", mb(nodeBound))
	r.require("proxy_growth_mb", "<=", mb(proxyBound))
	bound := fmt.Sprintf("margin %.0f MB (emulated nodes hold no KV)", mb(e.o.RSSMargin))
	if !e.o.Cluster.Emulated() {
		bound = fmt.Sprintf("prefix cache %.0f MB + margin %.0f MB, less what each node's cache already held at the first sample (the model is loaded before it)", mb(e.o.NodeCacheBytes), mb(e.o.RSSMargin))
		if w >= 0 {
			r.add("node_prefix_cache_start_mb", mb(cachedAtStart[w]), "MB")
		}
	}
	r.Details = append(r.Details,
		fmt.Sprintf("RSS (VmRSS) sampled every second from idle through %v of load at %.1f req/s, every query distinct", e.d.memory, 0.5*e.capacity),
		fmt.Sprintf("node growth bound: %s; judged: %s (its growth furthest beyond its bound)", bound, worst),
		fmt.Sprintf("proxy growth bound: score cache %.0f MB + margin %.0f MB", mb(e.o.ProxyCacheBytes), mb(e.o.RSSMargin)))
	return nil
}

// nodeGrowthBound is how much a node's RSS may grow from its first sample: the margin, and for a
// real node the part of its prefix-cache budget that the cache did not already hold then. The
// goal bounds RSS by model + cache budget + margin; a cache filled by the scenarios before this
// one is already in the first sample, and allowing its budget again on top let a node that held
// a full cache grow by a whole budget more and pass.
func nodeGrowthBound(emulated bool, margin, budget, cachedAtStart int64) int64 {
	if emulated {
		return margin
	}
	return margin + max(0, budget-cachedAtStart)
}

// worstNodeGrowth is the index of the node whose growth exceeds its bound the most (the largest
// growth among equals); -1 for none.
func worstNodeGrowth(nodes []rssSeries, bounds []int64) int {
	w := -1
	for i := range nodes {
		if w < 0 || nodes[i].growth()-bounds[i] >= nodes[w].growth()-bounds[w] {
			w = i
		}
	}
	return w
}

// nodePrefixCache reads one node's prefix cache from /v1/status; ok is false when it reports none.
func (e *env) nodePrefixCache(ctx context.Context, nd cluster.Node) (bytes, budget, evictions int64, ok bool) {
	b, err := e.get(ctx, "http://"+nd.HTTPAddr+"/v1/status")
	if err != nil {
		return 0, 0, 0, false
	}
	var st struct {
		PrefixCache *struct {
			Bytes       int64 `json:"bytes"`
			BudgetBytes int64 `json:"budget_bytes"`
			Evictions   int64 `json:"evictions"`
		} `json:"prefix_cache"`
	}
	if json.Unmarshal(b, &st) != nil || st.PrefixCache == nil {
		return 0, 0, 0, false
	}
	return st.PrefixCache.Bytes, st.PrefixCache.BudgetBytes, st.PrefixCache.Evictions, true
}

// prefixCaches reads the nodes' prefix caches from /v1/status: the fullest cache's bytes and
// budget, and the evictions of all; ok is false when no node reports a cache.
func (e *env) prefixCaches(ctx context.Context) (bytes, budget, evictions int64, ok bool) {
	for _, nd := range e.c.Nodes() {
		b, bud, ev, has := e.nodePrefixCache(ctx, nd)
		if !has {
			continue
		}
		ok = true
		if b >= bytes {
			bytes, budget = b, bud
		}
		evictions += ev
	}
	return bytes, budget, evictions, ok
}
