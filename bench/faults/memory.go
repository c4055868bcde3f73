package faults

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
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
}

func (s *rssSeries) add(pid int, v int64) {
	if s.samples == 0 || pid != s.pid {
		if s.samples > 0 {
			s.restarts++ // a new process: its growth counts from its own start
		}
		s.pid, s.start, s.peak = pid, v, v
	}
	s.samples++
	s.peak = max(s.peak, v)
	s.end = v
}

func (s *rssSeries) growth() int64 { return s.peak - s.start }

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
	rec := &recorder{}
	defer rec.close()
	t0 := time.Now()
	lr, err := e.startLoad(ctx, rec, 0.5, e.d.memory, false, spec)
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

	nodeBound := e.o.RSSMargin
	if !e.o.Cluster.Emulated() {
		nodeBound += e.o.NodeCacheBytes
	}
	proxyBound := e.o.RSSMargin + e.o.ProxyCacheBytes
	var start, peak, end, growth int64
	worst := ""
	for i, s := range nodes {
		start, peak, end = max(start, s.start), max(peak, s.peak), max(end, s.end)
		if s.growth() >= growth {
			growth, worst = s.growth(), e.c.Nodes()[i].Name
		}
		if s.restarts > 0 {
			r.Details = append(r.Details, fmt.Sprintf("%s restarted during the run; its growth counts from the new process", e.c.Nodes()[i].Name))
		}
	}
	r.add("distinct_queries", float64(len(calls)), "")
	r.add("node_rss_start_mb", mb(start), "MB")
	r.add("node_rss_peak_mb", mb(peak), "MB")
	r.add("node_rss_end_mb", mb(end), "MB")
	r.add("node_growth_mb", mb(growth), "MB")
	r.add("node_growth_bound_mb", mb(nodeBound), "MB")
	r.add("proxy_rss_start_mb", mb(proxy.start), "MB")
	r.add("proxy_rss_peak_mb", mb(proxy.peak), "MB")
	r.add("proxy_rss_end_mb", mb(proxy.end), "MB")
	r.add("proxy_growth_mb", mb(proxy.growth()), "MB")
	r.add("proxy_growth_bound_mb", mb(proxyBound), "MB")
	r.require("node_growth_mb", "<=", mb(nodeBound))
	r.require("proxy_growth_mb", "<=", mb(proxyBound))
	bound := fmt.Sprintf("margin %.0f MB (emulated nodes hold no KV)", mb(e.o.RSSMargin))
	if !e.o.Cluster.Emulated() {
		bound = fmt.Sprintf("prefix cache %.0f MB + margin %.0f MB (the model is loaded before the first sample)", mb(e.o.NodeCacheBytes), mb(e.o.RSSMargin))
	}
	r.Details = append(r.Details,
		fmt.Sprintf("RSS (VmRSS) sampled every second from idle through %v of load at %.1f req/s, every query distinct", e.d.memory, 0.5*e.capacity),
		fmt.Sprintf("node growth bound: %s; most growth: %s", bound, worst),
		fmt.Sprintf("proxy growth bound: score cache %.0f MB + margin %.0f MB", mb(e.o.ProxyCacheBytes), mb(e.o.RSSMargin)))
	return nil
}
