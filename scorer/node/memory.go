package node

import (
	"bufio"
	"bytes"
	"math"
	"net/http"
	"net/http/pprof"
	"os"
	"runtime"
	"runtime/debug"
	runtimemetrics "runtime/metrics"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// Memory is the node's memory by part, in bytes (/v1/status "memory",
// relevance_scorer_memory_bytes{part}). RSS ≈ WeightsResident + GoRuntime's resident share + C
// and stack odds; GoHeapInUse = PrefixCache + Working.
type Memory struct {
	// WeightsMapped is the size of the memory-mapped safetensors files; WeightsResident is how
	// much of them is in this process's RSS (file pages the kernel may drop and re-read, shared
	// with the page cache: not Go heap, not bounded by the memory limit).
	WeightsMapped   int64 `json:"weights_mapped_bytes"`
	WeightsResident int64 `json:"weights_resident_bytes"`
	// PrefixCache is what the prefix cache's published entries are charged (≤ its budget).
	PrefixCache int64 `json:"prefix_cache_bytes"`
	// Working is the Go heap in use beyond the prefix cache: the forward pass's activation arena
	// and MoE scratch (kept between passes), requests being scored, and garbage not yet collected.
	Working int64 `json:"working_bytes"`
	// GoHeapInUse is the Go heap's spans in use (objects and their fragmentation).
	GoHeapInUse int64 `json:"go_heap_inuse_bytes"`
	// GoRuntime is the memory the Go runtime holds from the OS and has not released: what the
	// memory limit bounds.
	GoRuntime int64 `json:"go_runtime_bytes"`
	// RSS is the process's resident set.
	RSS int64 `json:"rss_bytes"`
	// Limit is the Go memory limit in force (debug.SetMemoryLimit); 0 when none.
	Limit int64 `json:"limit_bytes"`
	// LimitSource says where Limit came from: "config" (memory_limit), "derived" (see
	// DeriveMemoryLimit), "GOMEMLIMIT" (the environment's, left alone) or "off".
	LimitSource string `json:"limit_source"`
}

// Memory-limit rule constants (see DeriveMemoryLimit).
const (
	// workingBytesPerToken bounds the forward pass's Go-heap working set per token of a merged
	// pass: the activation arena (residual, norm, q/k/v, attention, MLP or expert scratch, with
	// 25 % growth headroom) and the MoE packing buffers, ≈ 40 KiB per token on the small preset
	// (hidden 512) and ≈ 50 KiB on Qwen3-Reranker-0.6B (hidden 1024), rounded up.
	workingBytesPerToken = 64 << 10
	// memoryLimitBase covers the runtime, the tokenizer's tables (~60 MB for the Qwen3 vocabulary),
	// gRPC buffers and metrics.
	memoryLimitBase = 256 << 20
)

// DeriveMemoryLimit is the Go memory limit a node sets when memory_limit is 0:
//
//	limit = model + 1.25 × (prefix_cache_bytes + max_batch_tokens × 64 KiB) + 256 MiB
//
// where model is the Go heap the loaded model holds (live heap measured right after the load:
// the kernels' packed copies of the weights, widened vectors; 0 before the load). The
// memory-mapped checkpoint itself is not Go memory and is not counted. The 25 % is
// garbage-collection headroom; with the limit the collector runs earlier instead of letting the
// heap grow to twice its live size.
func DeriveMemoryLimit(c Config, model int64) int64 {
	working := int64(c.MaxBatchTokens) * workingBytesPerToken
	return max(model, 0) + (c.PrefixCacheBytes+working)*5/4 + memoryLimitBase
}

// liveHeap is the Go heap in live objects after a full collection (called once, after the
// model is loaded).
func liveHeap() int64 {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return int64(ms.HeapAlloc)
}

// applyMemoryLimit sets the Go memory limit from the config unless the environment sets
// GOMEMLIMIT, and returns the limit in force and its source; model is the loaded model's heap
// (see DeriveMemoryLimit).
func applyMemoryLimit(c Config, model int64) (int64, string) {
	if os.Getenv("GOMEMLIMIT") != "" {
		l := debug.SetMemoryLimit(-1)
		if l == math.MaxInt64 { // GOMEMLIMIT=off: no limit, reported as 0
			l = 0
		}
		return l, "GOMEMLIMIT"
	}
	switch {
	case c.MemoryLimit < 0:
		return 0, "off"
	case c.MemoryLimit > 0:
		debug.SetMemoryLimit(c.MemoryLimit)
		return c.MemoryLimit, "config"
	}
	l := DeriveMemoryLimit(c, model)
	debug.SetMemoryLimit(l)
	return l, "derived"
}

// memorySampler reads the node's memory at most once per interval: one scrape asks for every part,
// and /proc/self/smaps is not free to read.
type memorySampler struct {
	limit       int64
	limitSource string
	prefixCache func() int64 // the prefix cache's charged bytes; 0 when none

	mu   sync.Mutex
	at   time.Time
	last Memory
}

const memorySampleInterval = 500 * time.Millisecond

func (s *memorySampler) sample() Memory {
	s.mu.Lock()
	defer s.mu.Unlock()
	if now := time.Now(); now.Sub(s.at) >= memorySampleInterval {
		s.last = s.readLocked()
		s.at = now
	}
	return s.last
}

var memoryMetricNames = []string{
	"/memory/classes/heap/objects:bytes",
	"/memory/classes/heap/unused:bytes",
	"/memory/classes/total:bytes",
	"/memory/classes/heap/released:bytes",
}

// readLocked reads the parts now; s.mu must be held.
func (s *memorySampler) readLocked() Memory {
	m := Memory{Limit: s.limit, LimitSource: s.limitSource}
	samples := make([]runtimemetrics.Sample, len(memoryMetricNames))
	for i, n := range memoryMetricNames {
		samples[i].Name = n
	}
	runtimemetrics.Read(samples)
	v := func(i int) int64 {
		if samples[i].Value.Kind() != runtimemetrics.KindUint64 {
			return 0
		}
		return int64(samples[i].Value.Uint64())
	}
	m.GoHeapInUse = v(0) + v(1)
	m.GoRuntime = v(2) - v(3)
	if s.prefixCache != nil {
		m.PrefixCache = s.prefixCache()
	}
	m.Working = max(m.GoHeapInUse-m.PrefixCache, 0)
	m.RSS, m.WeightsMapped, m.WeightsResident = readSmaps()
	return m
}

// readSmaps sums /proc/self/smaps: the whole RSS, and the size and RSS of the mappings of
// *.safetensors files. All zero where the file does not exist (not Linux).
func readSmaps() (rss, weightsSize, weightsRSS int64) {
	b, err := os.ReadFile("/proc/self/smaps")
	if err != nil {
		return 0, 0, 0
	}
	weights := false
	sc := bufio.NewScanner(bytes.NewReader(b))
	for sc.Scan() {
		line := sc.Text()
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if !strings.HasSuffix(f[0], ":") { // a mapping's header: addr perms offset dev inode [path]
			weights = len(f) >= 6 && strings.HasSuffix(f[len(f)-1], ".safetensors")
			continue
		}
		if len(f) < 2 || (f[0] != "Size:" && f[0] != "Rss:") {
			continue
		}
		kb, err := strconv.ParseInt(f[1], 10, 64)
		if err != nil {
			continue
		}
		n := kb << 10
		switch {
		case f[0] == "Rss:":
			rss += n
			if weights {
				weightsRSS += n
			}
		case weights:
			weightsSize += n
		}
	}
	return rss, weightsSize, weightsRSS
}

// registerMemoryMetrics exports relevance_scorer_memory_bytes{part} from the sampler.
func registerMemoryMetrics(reg prometheus.Registerer, s *memorySampler) error {
	parts := []struct {
		name string
		get  func(Memory) int64
	}{
		{"weights_mapped", func(m Memory) int64 { return m.WeightsMapped }},
		{"weights_resident", func(m Memory) int64 { return m.WeightsResident }},
		{"prefix_cache", func(m Memory) int64 { return m.PrefixCache }},
		{"working", func(m Memory) int64 { return m.Working }},
		{"go_heap_inuse", func(m Memory) int64 { return m.GoHeapInUse }},
		{"go_runtime", func(m Memory) int64 { return m.GoRuntime }},
		{"rss", func(m Memory) int64 { return m.RSS }},
		{"limit", func(m Memory) int64 { return m.Limit }},
	}
	for _, p := range parts {
		g := prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "relevance_scorer_memory_bytes",
			Help:        "The node's memory by part: weights (mapped, resident), prefix cache (charged), working (Go heap beyond the cache), Go heap in use, Go runtime total, RSS, and the Go memory limit (0: none).",
			ConstLabels: prometheus.Labels{"part": p.name},
		}, func() float64 { return float64(p.get(s.sample())) })
		if err := reg.Register(g); err != nil {
			return err
		}
	}
	return nil
}

// prefixCacheBytes is the engine's prefix cache charge, 0 before the load or without a cache.
func (n *Node) prefixCacheBytes() int64 {
	p := n.engine.Load()
	if p == nil {
		return 0
	}
	if pc, ok := (*p).(PrefixCacheStatser); ok {
		if st, ok := pc.PrefixCacheStats(); ok {
			return st.Bytes
		}
	}
	return 0
}

// registerPProf serves net/http/pprof's handlers on mux (Config.PProf).
func registerPProf(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
}

// setLimit records the limit in force after it was re-derived.
func (s *memorySampler) setLimit(limit int64, source string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.limit, s.limitSource = limit, source
	s.at = time.Time{} // the next read samples again
}

// limits is the limit in force and its source.
func (s *memorySampler) limits() (int64, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.limit, s.limitSource
}
