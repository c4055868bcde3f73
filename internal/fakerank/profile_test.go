package fakerank

import (
	"context"
	"math"
	"math/rand/v2"
	"net/http"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/prompt"
)

// proxyRendered is a call as the proxy sends it with template proxy: the shared prefix in the
// query, each document as " "+document+tail.
func proxyRendered(query string, docs ...string) Request {
	q := prompt.HeadText + prompt.BodyPrefix("", query)
	r := Request{Query: q}
	for _, d := range docs {
		doc := " " + d + prompt.TailText
		r.Documents = append(r.Documents, doc)
		r.Prompts = append(r.Prompts, q+doc)
	}
	return r
}

func TestRequestFeatures(t *testing.T) {
	c, err := prompt.NewCounter(prompt.CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	docs := []string{"Sony WH-1000XM5 over-ear headphones, 30 h battery", "Stainless steel kitchen knife set", "无线蓝牙耳机 降噪 长续航"}
	var items []int
	for _, d := range docs {
		items = append(items, c.Item(d))
	}
	want := costmodel.BatchFeatures(c.Prefix("", "wireless headphones"), items, false)
	if got := RequestFeatures(proxyRendered("wireless headphones", docs...), c); got != want {
		t.Errorf("proxy-rendered call: features %+v, want %+v (prefix once, prompt's counts)", got, want)
	}
	// Not a Qwen3-Reranker prompt: the fake's own count, bytes/4.
	plain := Request{Query: "abcdefgh", Documents: []string{"abcd", "abcde"}, Prompts: []string{"abcdefghabcd", "abcdefghabcde"}}
	if got, want := RequestFeatures(plain, c), costmodel.BatchFeatures(2, []int{1, 2}, false); got != want {
		t.Errorf("plain call: features %+v, want %+v", got, want)
	}
}

// TestProfileLatencyFollowsProfile: over many calls the latency is the profile's prediction
// times a log-normal noise of the profile's σ: median ≈ 1×, mean ≈ exp(σ²/2)×, within the
// sampling error; the same injected source gives the same latencies.
func TestProfileLatencyFollowsProfile(t *testing.T) {
	prof := &costmodel.Profile{Coeffs: costmodel.Coeffs{A: 6.35e-4, B: 4.29e-7, C: 0.019}, NoiseSigma: 0.08}
	c, err := prompt.NewCounter(prompt.CountEstimate)
	if err != nil {
		t.Fatal(err)
	}
	lat, err := ProfileLatency(prof, ProfileOptions{Counter: c, Rand: rand.New(rand.NewPCG(7, 8))})
	if err != nil {
		t.Fatal(err)
	}
	reqs := []Request{
		proxyRendered("usb-c charger", "65 W GaN USB-C charger"),
		proxyRendered("running shoes", "Nike Pegasus 41", "Cast-iron pan", "Trail shoes, waterproof, size 44", strings.Repeat("long listing text ", 40)),
	}
	const n = 4000
	ratios := make([]float64, 0, n)
	sum := 0.0
	for i := range n {
		r := reqs[i%len(reqs)]
		pred := prof.Seconds(RequestFeatures(r, c))
		x := lat(r).Seconds() / pred
		ratios = append(ratios, x)
		sum += x
	}
	mean := sum / n
	sigma := prof.NoiseSigma
	wantMean := math.Exp(sigma * sigma / 2)
	se := wantMean * math.Sqrt(math.Exp(sigma*sigma)-1) / math.Sqrt(n) // standard error of the mean
	if math.Abs(mean-wantMean) > 4*se {
		t.Errorf("mean latency/prediction %.5f, want %.5f ± %.5f", mean, wantMean, 4*se)
	}
	slices.Sort(ratios)
	if med := ratios[n/2]; math.Abs(math.Log(med)) > 4*sigma/math.Sqrt(n)*1.26 {
		t.Errorf("median latency/prediction %.4f, want 1", med)
	}
	sd := 0.0
	for _, x := range ratios {
		sd += (math.Log(x)) * (math.Log(x))
	}
	if sd = math.Sqrt(sd / n); math.Abs(sd-sigma) > 0.1*sigma {
		t.Errorf("σ(log latency/prediction) %.4f, want %.4f", sd, sigma)
	}

	// The same source, the same latencies; no noise, the prediction itself.
	a, _ := ProfileLatency(prof, ProfileOptions{Counter: c, Seed: 3})
	b, _ := ProfileLatency(prof, ProfileOptions{Counter: c, Seed: 3})
	for range 5 {
		if x, y := a(reqs[1]), b(reqs[1]); x != y {
			t.Fatalf("same seed: %v vs %v", x, y)
		}
	}
	quiet, _ := ProfileLatency(&costmodel.Profile{Coeffs: prof.Coeffs}, ProfileOptions{Counter: c})
	if got, want := quiet(reqs[1]).Seconds(), prof.Seconds(RequestFeatures(reqs[1], c)); math.Abs(got-want) > 1e-9 {
		t.Errorf("σ = 0: %v s, want %v s", got, want)
	}
	if _, err := ProfileLatency(&costmodel.Profile{Coeffs: costmodel.Coeffs{A: -1}}, ProfileOptions{Counter: c}); err == nil {
		t.Error("an invalid profile was accepted")
	}
}

// post sends one vLLM rerank call of n documents and returns when it was answered.
func post(ctx context.Context, s *Server, n int) (time.Time, error) {
	docs := make([]string, n)
	for i := range docs {
		docs[i] = `"d` + strconv.Itoa(i) + `"`
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, "http://"+s.Addr()+"/rerank", strings.NewReader(`{"query":"q","documents":[`+strings.Join(docs, ",")+`]}`))
	if err != nil {
		return time.Time{}, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return time.Time{}, err
	}
	_ = resp.Body.Close()
	if resp.StatusCode != 200 {
		return time.Time{}, &httpStatusError{resp.StatusCode}
	}
	return time.Now(), nil
}

type httpStatusError struct{ code int }

func (e *httpStatusError) Error() string { return "HTTP " + strconv.Itoa(e.code) }

var gaugeRE = regexp.MustCompile(`(?m)^vllm:num_requests_(waiting|running)\{[^}]*\} (\S+)$`)

func gauges(t *testing.T, s *Server) (waiting, running float64) {
	t.Helper()
	_, got := call(t, s, http.MethodGet, "/metrics", "")
	text, _ := got.(string)
	for _, m := range gaugeRE.FindAllStringSubmatch(text, -1) {
		v, _ := strconv.ParseFloat(m[2], 64)
		if m[1] == "waiting" {
			waiting = v
		} else {
			running = v
		}
	}
	return waiting, running
}

// TestConcurrencyQueues: with Concurrency 1 calls run one at a time in arrival order, the
// queued ones counted as waiting; a client that leaves the queue is dropped from it; with
// Concurrency 2 two run at once.
func TestConcurrencyQueues(t *testing.T) {
	const d = 150 * time.Millisecond
	s := start(t, KindVLLM, Options{Concurrency: 1, Latency: func(Request) time.Duration { return d }})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	began := time.Now()
	type result struct {
		i   int
		at  time.Time
		err error
	}
	results := make(chan result, 4)
	leaver, leave := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 4 {
		c := ctx
		if i == 2 {
			c = leaver // the third in line leaves before its turn
		}
		wg.Go(func() {
			at, err := post(c, s, 2)
			results <- result{i, at, err}
		})
		// Arrive in order: each call is in the slots' line before the next is sent. (Counting
		// calls received was not enough: under the race detector on a loaded machine a call's
		// handler could reach the line after the next call's.)
		for s.slots.inLine() < i+1 {
			if ctx.Err() != nil {
				t.Fatalf("call %d never joined the line", i)
			}
			time.Sleep(time.Millisecond)
		}
	}
	// One running (2 documents), three queued (6 documents).
	for {
		w, r := gauges(t, s)
		if w == 6 && r == 2 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("gauges waiting %v running %v, want 6 and 2", w, r)
		}
		time.Sleep(5 * time.Millisecond)
	}
	leave()
	wg.Wait()
	close(results)
	var answered []result
	for r := range results {
		if r.i == 2 {
			if r.err == nil {
				t.Error("the call that left was answered")
			}
			continue
		}
		if r.err != nil {
			t.Fatalf("call %d: %v", r.i, r.err)
		}
		answered = append(answered, r)
	}
	slices.SortFunc(answered, func(a, b result) int { return a.at.Compare(b.at) })
	var order []int
	var ends []time.Duration
	for _, r := range answered {
		order = append(order, r.i)
		ends = append(ends, r.at.Sub(began))
	}
	if !slices.Equal(order, []int{0, 1, 3}) {
		t.Errorf("answered in the order %v, want 0 1 3 (first come, first served)", order)
	}
	for k, e := range ends {
		if want := time.Duration(k+1) * d; e < want {
			t.Errorf("call %d of 3 answered after %v, want ≥ %v (one at a time; the leaver takes no turn)", k+1, e, want)
		}
	}
	if ends[2] > 3*d+2*time.Second {
		t.Errorf("last call after %v: the leaver held the queue", ends[2])
	}
	if w, r := gauges(t, s); w != 0 || r != 0 {
		t.Errorf("idle gauges waiting %v running %v", w, r)
	}

	// Concurrency 2: four calls in two waves.
	s2 := start(t, KindVLLM, Options{Concurrency: 2, Latency: func(Request) time.Duration { return d }})
	began = time.Now()
	var mu sync.Mutex
	var ends2 []time.Duration
	for range 4 {
		wg.Go(func() {
			at, err := post(ctx, s2, 1)
			if err != nil {
				t.Error(err)
				return
			}
			mu.Lock()
			ends2 = append(ends2, at.Sub(began))
			mu.Unlock()
		})
	}
	wg.Wait()
	slices.Sort(ends2)
	if len(ends2) != 4 || ends2[1] < d || ends2[2] < 2*d {
		t.Errorf("concurrency 2: answers after %v, want two by %v and two by %v", ends2, d, 2*d)
	}
}

// TestCloseEndsQueuedCalls: Close ends calls waiting in the queue too.
func TestCloseEndsQueuedCalls(t *testing.T) {
	s, err := Start(KindVLLM, Options{Concurrency: 1, Latency: func(Request) time.Duration { return time.Hour }})
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 3 {
		wg.Go(func() { _, _ = post(context.Background(), s, 1) })
	}
	for s.Calls() < 3 {
		time.Sleep(time.Millisecond)
	}
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	s.Close()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("queued calls outlived Close")
	}
}

func TestKindsAndAddr(t *testing.T) {
	if got := Kinds(); !slices.Equal(got, []string{KindInfinity, KindLlamaCpp, KindSGLang, KindTEI, KindVLLM}) {
		t.Errorf("Kinds() = %v", got)
	}
	for _, k := range Kinds() {
		if HealthPath(k) != "/health" {
			t.Errorf("HealthPath(%s) = %q", k, HealthPath(k))
		}
	}
	if HealthPath("nope") != "" {
		t.Error("HealthPath of an unknown kind")
	}
	s := start(t, KindVLLM, Options{Addr: "127.0.0.1:0"})
	if !strings.HasPrefix(s.Addr(), "127.0.0.1:") {
		t.Errorf("Addr %q", s.Addr())
	}
	if _, err := Start(KindVLLM, Options{Concurrency: -1}); err == nil {
		t.Error("negative concurrency accepted")
	}
}
