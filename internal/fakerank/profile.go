package fakerank

import (
	"errors"
	"math"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/prompt"
)

// Kinds lists the kinds of server a fake can be, sorted.
func Kinds() []string {
	ks := make([]string, 0, len(dialects))
	for k := range dialects {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}

// HealthPath is the health endpoint of kind's server ("" for an unknown kind): 200 when ready.
func HealthPath(kind string) string {
	if d, ok := dialects[kind]; ok {
		return d.healthPath
	}
	return ""
}

// RequestFeatures is the work of one rerank call as our engine would do it, for costmodel: the
// call is one batch whose shared prefix is computed once and whose documents are its items (as
// the scorer node computes a batch, and as vLLM's prefix cache shares one prefix per query); no
// prefix is reused across calls.
//
// Tokens are counted with c, as planning counts them: a prompt that is a Qwen3-Reranker prompt
// (rendered by the proxy or by the fake's own template) has c.Prefix(instruction, query) prefix
// tokens and c.Item(document) item tokens. A call whose prompts are not (a plain query and
// documents) is counted as the fake counts: the query's bytes/4 as the prefix, each document's
// bytes/4 as an item.
func RequestFeatures(req Request, c *prompt.Counter) costmodel.Features {
	prefix := -1
	items := make([]int, len(req.Prompts))
	for i, text := range req.Prompts {
		instr, q, doc, ok := Parse(text)
		if !ok {
			prefix = -1
			break
		}
		if prefix < 0 {
			prefix = c.Prefix(instr, q)
		}
		items[i] = c.Item(doc)
	}
	if prefix < 0 {
		prefix = tokens(req.Query)
		items = items[:0]
		for _, d := range req.Documents {
			items = append(items, tokens(d))
		}
	}
	return costmodel.BatchFeatures(prefix, items, false)
}

// ProfileOptions configure ProfileLatency.
type ProfileOptions struct {
	// Counter counts tokens (see RequestFeatures); nil means prompt's exact counter (the shipped
	// Qwen3 tokenizer, as a real server and our emulated scorer node count them).
	Counter *prompt.Counter
	// Rand draws the noise; nil means a PCG seeded with Seed. It is used under a lock.
	Rand *rand.Rand
	// Seed seeds the default source.
	Seed uint64
}

// ProfileLatency returns a latency function (Options.Latency) that takes what profile p predicts
// for a call, p.Seconds(RequestFeatures(req)), times a log-normal noise exp(σ·Z) with σ =
// p.NoiseSigma (median 1, mean exp(σ²/2)): the same model the emulated scorer node sleeps by.
func ProfileLatency(p *costmodel.Profile, o ProfileOptions) (func(Request) time.Duration, error) {
	if p == nil {
		return nil, errors.New("fakerank: no cost profile")
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	c := o.Counter
	if c == nil {
		var err error
		if c, err = prompt.NewCounter(prompt.CountExact); err != nil {
			return nil, err
		}
	}
	rng := o.Rand
	if rng == nil {
		rng = rand.New(rand.NewPCG(o.Seed, o.Seed^0x9e3779b97f4a7c15))
	}
	prof := *p
	var mu sync.Mutex
	return func(req Request) time.Duration {
		secs := prof.Seconds(RequestFeatures(req, c))
		if prof.NoiseSigma > 0 {
			mu.Lock()
			z := rng.NormFloat64()
			mu.Unlock()
			secs *= math.Exp(prof.NoiseSigma * z)
		}
		return time.Duration(secs * float64(time.Second))
	}, nil
}

// slots is a counting semaphore whose waiters are served first come, first served.
type slots struct {
	mu      sync.Mutex
	n, free int
	waiters []chan struct{}
}

func newSlots(n int) *slots { return &slots{n: n, free: n} }

// inLine is how many calls hold a slot or wait in line for one.
func (q *slots) inLine() int {
	q.mu.Lock()
	defer q.mu.Unlock()
	return q.n - q.free + len(q.waiters)
}

// acquire takes a slot, waiting in line; it gives up (false) when either channel closes first.
func (q *slots) acquire(leave, closed <-chan struct{}) bool {
	q.mu.Lock()
	if q.free > 0 && len(q.waiters) == 0 {
		q.free--
		q.mu.Unlock()
		return true
	}
	ch := make(chan struct{})
	q.waiters = append(q.waiters, ch)
	q.mu.Unlock()
	select {
	case <-ch:
		return true
	case <-leave:
	case <-closed:
	}
	q.mu.Lock()
	for i, w := range q.waiters {
		if w == ch {
			q.waiters = append(q.waiters[:i], q.waiters[i+1:]...)
			q.mu.Unlock()
			return false
		}
	}
	q.mu.Unlock()
	// Granted meanwhile: hand the slot on.
	q.release()
	return false
}

// release frees a slot: to the first waiter, if any.
func (q *slots) release() {
	q.mu.Lock()
	defer q.mu.Unlock()
	if len(q.waiters) > 0 {
		close(q.waiters[0])
		q.waiters = q.waiters[1:]
		return
	}
	q.free++
}
