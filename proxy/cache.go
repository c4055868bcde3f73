package proxy

import (
	"time"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/merge"
	"github.com/relevance-scoring/relevance/proxy/scorecache"
)

// cacheLookup is one request's view of the score cache.
type cacheLookup struct {
	fp     string // the fingerprint the keys were made with ("": none)
	keys   []scorecache.Key
	hit    []bool
	cached []scorecache.Entry
	misses int
	// missed lists the request indices of the items not in the cache, in order.
	missed []int
}

// lookup finds req's items in the cache under the model fingerprint fp. Without a cache, a
// fingerprint, or with options.no_cache, nothing hits (but a fingerprint still yields keys, so
// that fresh scores refresh the cache).
func (p *Proxy) lookup(req *relevancev1.ScoreRequest, fp string) cacheLookup {
	n := len(req.GetItems())
	look := cacheLookup{misses: n}
	if p.cache == nil || fp == "" {
		return look
	}
	keyer := scorecache.NewKeyer(fp, req.GetInstruction(), req.GetOptions(), req.GetQuery())
	look.fp = fp
	look.keys = make([]scorecache.Key, n)
	look.hit = make([]bool, n)
	look.cached = make([]scorecache.Entry, n)
	for i, it := range req.GetItems() {
		look.keys[i] = keyer.Key(it.GetText())
		if req.GetOptions().GetNoCache() {
			continue
		}
		if e, ok := p.cache.Get(look.keys[i]); ok {
			look.hit[i], look.cached[i] = true, e
			look.misses--
		}
	}
	if look.misses < n {
		look.missed = make([]int, 0, look.misses)
		for i := range n {
			if !look.hit[i] {
				look.missed = append(look.missed, i)
			}
		}
	}
	return look
}

// sub is the request of the items the cache did not have (req itself when nothing hit).
func (l cacheLookup) sub(req *relevancev1.ScoreRequest) *relevancev1.ScoreRequest {
	if l.missed == nil {
		return req
	}
	sub := &relevancev1.ScoreRequest{
		RequestId:   req.GetRequestId(),
		Query:       req.GetQuery(),
		Instruction: req.GetInstruction(),
		Options:     req.GetOptions(),
		Model:       req.GetModel(),
		TimeoutMs:   req.GetTimeoutMs(),
		Items:       make([]*relevancev1.Item, len(l.missed)),
	}
	for j, i := range l.missed {
		sub.Items[j] = req.GetItems()[i]
	}
	return sub
}

// splice puts the cached and the freshly scored items together in request order and ranks them
// all (resp answers l.sub(req)).
func (l cacheLookup) splice(req *relevancev1.ScoreRequest, resp *relevancev1.ScoreResponse) *relevancev1.ScoreResponse {
	if l.missed == nil {
		return resp
	}
	fresh := resp.GetScores()
	resp.Scores = make([]*relevancev1.ItemScore, len(req.GetItems()))
	for j, i := range l.missed {
		s := fresh[j]
		s.Index = uint32(i)
		resp.Scores[i] = s
	}
	if resp.Usage == nil {
		resp.Usage = &relevancev1.Usage{}
	}
	for i, it := range req.GetItems() {
		if l.hit[i] {
			resp.Scores[i] = l.cached[i].ItemScore(i, it.GetId())
			// prompt_tokens is every prompt token the request stands for, a cached item's too;
			// tokens_truncated every document token its truncation cut.
			resp.Usage.PromptTokens += l.cached[i].PromptTokens()
			resp.Usage.TokensTruncated += uint64(l.cached[i].TruncatedTokens)
		}
	}
	resp.Ranking = merge.Ranking(resp.Scores, int(req.GetTopN()))
	resp.Usage.CachedItems = uint64(len(req.GetItems()) - len(l.missed))
	return resp
}

// fromCache answers a request whose every item was cached.
func (p *Proxy) fromCache(req *relevancev1.ScoreRequest, reqID string, l cacheLookup, start time.Time) *relevancev1.ScoreResponse {
	out := &relevancev1.ScoreResponse{RequestId: reqID, Scores: make([]*relevancev1.ItemScore, len(req.GetItems())),
		Usage: &relevancev1.Usage{CachedItems: uint64(len(req.GetItems()))}, Model: p.servedModel(l.fp)}
	for i, it := range req.GetItems() {
		out.Scores[i] = l.cached[i].ItemScore(i, it.GetId())
		out.Usage.PromptTokens += l.cached[i].PromptTokens()
		out.Usage.TokensTruncated += uint64(l.cached[i].TruncatedTokens)
	}
	out.Ranking = merge.Ranking(out.Scores, int(req.GetTopN()))
	if req.GetOptions().GetReturnTimings() {
		out.Timings = &relevancev1.Timings{TotalSeconds: time.Since(start).Seconds()}
	}
	return out
}

// fill caches the fresh scores of resp (which answers l.sub(req)) under the fingerprint fp they
// were computed with, except those of the items marked unidentified (answered without fp: see
// unidentified in score.go).
func (p *Proxy) fill(req *relevancev1.ScoreRequest, fp string, l cacheLookup, resp *relevancev1.ScoreResponse, unidentified []bool) {
	if p.cache == nil || fp == "" {
		return
	}
	keys := l.keys
	if l.fp != fp { // planned before the fingerprint was known: key the items now
		keyer := scorecache.NewKeyer(fp, req.GetInstruction(), req.GetOptions(), req.GetQuery())
		keys = make([]scorecache.Key, len(req.GetItems()))
		for i, it := range req.GetItems() {
			keys[i] = keyer.Key(it.GetText())
		}
	}
	prefix := prefixPerItem(resp)
	for j, s := range resp.GetScores() {
		if !scorecache.Cacheable(s) || j < len(unidentified) && unidentified[j] {
			continue
		}
		i := j
		if l.missed != nil {
			i = l.missed[j]
		}
		p.cache.Put(keys[i], scorecache.EntryOf(s, prefix))
	}
}

// servedModel is the model name a reply of scores computed under fingerprint fp carries: the
// configured one, else the name the nodes of fp report. During an update that renames the model
// the nodes report two names, and only that one is the model of those scores.
func (p *Proxy) servedModel(fp string) string {
	if p.cfg.Model.Name != "" {
		return p.cfg.Model.Name
	}
	name, _ := p.cluster.ModelOf(fp)
	return name
}

// prefixPerItem is the shared prefix each scored item of resp stood for, in tokens: a node counts
// prompt_tokens as Σ (prefix + the item's tokens) over the scored items, and every item of one
// request has the same prefix. Backends that report no per-item tokens get the mean prompt.
func prefixPerItem(resp *relevancev1.ScoreResponse) uint32 {
	var scored, own uint64
	for _, s := range resp.GetScores() {
		switch s.GetStatus() {
		case relevancev1.ItemStatus_ITEM_STATUS_TOO_LONG, relevancev1.ItemStatus_ITEM_STATUS_FAILED:
		default:
			scored++
			own += uint64(s.GetTokens())
		}
	}
	total := resp.GetUsage().GetPromptTokens()
	if scored == 0 || total < own {
		return 0
	}
	return uint32(min((total-own)/scored, 1<<32-1))
}
