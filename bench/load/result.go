package load

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/HdrHistogram/hdrhistogram-go"
)

// Result is what a load test measured. Its JSON is the contract of `bench load --json`: at
// least p50_ms, p99_ms, throughput_rps, errors and goodput_rps.
type Result struct {
	Target      string  `json:"target"`
	Workload    string  `json:"workload"`
	Mode        string  `json:"mode"` // open or closed
	RatePerSec  float64 `json:"rate_rps,omitempty"`
	Concurrency int     `json:"concurrency,omitempty"`
	DurationSec float64 `json:"duration_s"`
	WarmupSec   float64 `json:"warmup_s"`
	// ElapsedSec is the measurement window: end of warm-up to the last reply (open loop), or
	// end of warm-up to the end of the duration (closed loop: like wrk, the rates count only
	// replies that arrived within it). Either way the rates count the window's replies to
	// warm-up requests too.
	ElapsedSec float64 `json:"elapsed_s"`
	SLOms      float64 `json:"slo_ms"`
	// Emulated: the nodes are emulated (timings from a cost profile), as the proxy's /v1/nodes
	// said of any node during the run, or as the caller knows.
	Emulated bool `json:"emulated,omitempty"`

	Requests int64            `json:"requests"`
	OK       int64            `json:"ok"`
	Errors   int64            `json:"errors"`
	ErrorsBy map[string]int64 `json:"errors_by_kind"`

	// Latency of the successful requests (nearest rank).
	P50ms  float64 `json:"p50_ms"`
	P90ms  float64 `json:"p90_ms"`
	P99ms  float64 `json:"p99_ms"`
	P999ms float64 `json:"p999_ms"`
	MaxMs  float64 `json:"max_ms"`
	MeanMs float64 `json:"mean_ms"`
	// P99AllMs is p99 over every measured request, each failure counted as the client's timeout
	// (equal to P99ms when none failed).
	P99AllMs float64 `json:"p99_all_ms"`

	ThroughputRPS float64 `json:"throughput_rps"`
	ItemsPerSec   float64 `json:"items_per_s"`
	// GoodputRPS counts successful replies within the SLO per second.
	GoodputRPS float64 `json:"goodput_rps"`
	// GoodputRatio is the share of measured requests answered successfully within the SLO.
	GoodputRatio float64 `json:"goodput_ratio"`

	CDF      []Quantile   `json:"cdf"`
	Timeline []Window     `json:"timeline"`
	Points   []Point      `json:"-"`
	Nodes    []NodeSample `json:"node_load,omitempty"`

	hist *hdrhistogram.Histogram
}

// Histogram returns the latency histogram of successful requests in microseconds (nil for a
// decoded result).
func (r *Result) Histogram() *hdrhistogram.Histogram { return r.hist }

// Quantile is one point of the latency distribution.
type Quantile struct {
	Q  float64 `json:"q"`
	Ms float64 `json:"ms"`
}

// Window is one second of the run, by intended send time.
type Window struct {
	T      float64 `json:"t_s"`
	OK     int64   `json:"ok"`
	Errors int64   `json:"errors"`
	P50ms  float64 `json:"p50_ms"`
	P99ms  float64 `json:"p99_ms"`
}

// Point is one successful request: intended send time and latency.
type Point struct {
	T  float64
	Ms float64
}

// NodeSample is one node's load as the proxy reported it at time T.
type NodeSample struct {
	T    float64 `json:"t_s"`
	Node string  `json:"node"`
	// Load is the node's outstanding work as the proxy sees it (estimated cost in seconds
	// when the proxy reports it, else in-flight batches).
	Load float64 `json:"load"`
	// Emulated: the proxy says the node runs the emulated engine.
	Emulated bool `json:"emulated,omitempty"`
}

// Summary is a three-line human summary. Without a successful request it prints no
// percentiles (they would describe nothing) but says so.
func (r *Result) Summary() string {
	var kinds []string
	for k, n := range r.ErrorsBy {
		kinds = append(kinds, fmt.Sprintf("%s=%d", k, n))
	}
	sort.Strings(kinds)
	latency := "latency: no successful requests"
	if r.OK > 0 {
		latency = fmt.Sprintf("latency p50 %.1f ms  p90 %.1f ms  p99 %.1f ms  p99.9 %.1f ms  max %.1f ms",
			r.P50ms, r.P90ms, r.P99ms, r.P999ms, r.MaxMs)
		if r.Errors > 0 {
			latency = strings.Replace(latency, "latency", "latency of the ok", 1) +
				fmt.Sprintf("  (p99 of all, failures at the timeout: %.1f ms)", r.P99AllMs)
		}
		// Where latency is measured from decides what it means (coordinated omission): say it.
		switch r.Mode {
		case "open":
			latency += "  [from each request's intended send time]"
		case "closed":
			latency += "  [from each request's actual send]"
		}
	}
	return fmt.Sprintf("requests %d  ok %d  errors %d %v\n%s\nthroughput %.2f req/s  %.1f items/s  goodput(≤%.0f ms) %.2f req/s (%.1f%%)",
		r.Requests, r.OK, r.Errors, kinds, latency,
		r.ThroughputRPS, r.ItemsPerSec, r.SLOms, r.GoodputRPS, 100*r.GoodputRatio)
}

// ErrorRate is the share of measured requests that failed; 0 when none was measured.
func (r *Result) ErrorRate() float64 {
	if r.Requests == 0 {
		return 0
	}
	return float64(r.Errors) / float64(r.Requests)
}

// CheckErrors reports whether the run is a failure: no request was measured, or more than
// maxRate (a share in [0, 1]) of them failed. The error says why, for the tool's last line.
func (r *Result) CheckErrors(maxRate float64) error {
	if r.Requests == 0 {
		return errors.New("no request was measured (rate × (duration − warm-up) too small?)")
	}
	if rate := r.ErrorRate(); rate > maxRate {
		return fmt.Errorf("%d of %d requests failed (%.1f %%, above --max-error-rate %.1f %%): %s",
			r.Errors, r.Requests, 100*rate, 100*maxRate, r.errorKinds())
	}
	return nil
}

// errorKinds lists the error counts by kind, most frequent first.
func (r *Result) errorKinds() string {
	kinds := make([]string, 0, len(r.ErrorsBy))
	for k := range r.ErrorsBy {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool {
		if a, b := r.ErrorsBy[kinds[i]], r.ErrorsBy[kinds[j]]; a != b {
			return a > b
		}
		return kinds[i] < kinds[j]
	})
	parts := make([]string, len(kinds))
	for i, k := range kinds {
		parts[i] = fmt.Sprintf("%d× %s", r.ErrorsBy[k], k)
	}
	return strings.Join(parts, ", ")
}

// MarshalJSON writes the latency figures (p50_ms … mean_ms) as null when no request succeeded:
// a 0 there would read as an instant reply. Decoding a null leaves the field 0.
func (r *Result) MarshalJSON() ([]byte, error) {
	type plain Result // no methods: no recursion
	out := struct {
		*plain
		P50ms  *float64 `json:"p50_ms"`
		P90ms  *float64 `json:"p90_ms"`
		P99ms  *float64 `json:"p99_ms"`
		P999ms *float64 `json:"p999_ms"`
		MaxMs  *float64 `json:"max_ms"`
		MeanMs *float64 `json:"mean_ms"`
	}{plain: (*plain)(r)}
	if r.OK > 0 {
		out.P50ms, out.P90ms, out.P99ms, out.P999ms, out.MaxMs, out.MeanMs = &r.P50ms, &r.P90ms, &r.P99ms, &r.P999ms, &r.MaxMs, &r.MeanMs
	}
	return json.Marshal(out)
}

// MarshalJSON writes a second without successful replies with null percentiles.
func (w Window) MarshalJSON() ([]byte, error) {
	type plain Window
	out := struct {
		plain
		P50ms *float64 `json:"p50_ms"`
		P99ms *float64 `json:"p99_ms"`
	}{plain: plain(w)}
	if w.OK > 0 {
		out.P50ms, out.P99ms = &w.P50ms, &w.P99ms
	}
	return json.Marshal(out)
}

// nodePoller polls the proxy's /v1/nodes.
type nodePoller struct {
	cancel  context.CancelFunc
	done    chan struct{} // closed by stop: poll once more, then return
	wg      sync.WaitGroup
	mu      sync.Mutex
	samples []NodeSample
}

func startNodePoller(ctx context.Context, url string, every time.Duration, start time.Time) *nodePoller {
	ctx, cancel := context.WithCancel(ctx)
	p := &nodePoller{cancel: cancel, done: make(chan struct{})}
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{Proxy: nil}}
	poll := func() {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return
		}
		resp, err := client.Do(req)
		if err != nil {
			return
		}
		b, err := io.ReadAll(io.LimitReader(resp.Body, 4<<20))
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			return
		}
		now := time.Since(start).Seconds()
		loads := ParseNodes(b)
		p.mu.Lock()
		for _, l := range loads {
			l.T = now
			p.samples = append(p.samples, l)
		}
		p.mu.Unlock()
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-p.done:
				// Once more at the end: a node is known to be emulated only once it has
				// answered, and the last replies may have come after the last tick.
				poll()
				return
			case <-t.C:
			}
			poll()
		}
	}()
	return p
}

func (p *nodePoller) stop() []NodeSample {
	close(p.done)
	p.wg.Wait()
	p.cancel()
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.samples
}

// ParseNodes reads a /v1/nodes reply leniently: a JSON array of node objects, or an object
// holding one under "nodes". A node's name is its id/node/name/addr/address field; its load is
// the first numeric field whose name mentions inflight and cost (else inflight, else load).
func ParseNodes(b []byte) []NodeSample {
	var arr []map[string]any
	if err := json.Unmarshal(b, &arr); err != nil {
		var obj map[string]json.RawMessage
		if err := json.Unmarshal(b, &obj); err != nil {
			return nil
		}
		if err := json.Unmarshal(obj["nodes"], &arr); err != nil {
			return nil
		}
	}
	var out []NodeSample
	for i, n := range arr {
		name := fmt.Sprint(i)
		for _, k := range []string{"id", "node", "name", "addr", "address"} {
			if s, ok := n[k].(string); ok && s != "" {
				name = s
				break
			}
		}
		load, found := 0.0, false
		for _, want := range [][]string{{"inflight", "cost"}, {"in_flight", "cost"}, {"inflight"}, {"in_flight"}, {"load"}} {
			keys := make([]string, 0, len(n))
			for k := range n {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			for _, k := range keys {
				f, ok := n[k].(float64)
				if !ok || !containsAll(strings.ToLower(k), want) {
					continue
				}
				load, found = f, true
				break
			}
			if found {
				break
			}
		}
		if found {
			emulated, _ := n["emulated"].(bool)
			out = append(out, NodeSample{Node: name, Load: load, Emulated: emulated})
		}
	}
	return out
}

func containsAll(s string, parts []string) bool {
	for _, p := range parts {
		if !strings.Contains(s, p) {
			return false
		}
	}
	return true
}
