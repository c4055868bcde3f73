package proxy

import (
	"context"
	"time"
	"unicode/utf8"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/merge"
)

// Score scores every item of req against its query across the nodes. It reads as the pipeline's
// stages: validate, plan (token counts, batches, each placed on a node with its projected finish;
// package plan), admit (package admit), dispatch (package dispatch), merge (package merge).
//
// Errors are gRPC status errors: INVALID_ARGUMENT (the message names the field),
// RESOURCE_EXHAUSTED with RetryInfo (admission), UNAVAILABLE (no node can serve, or a batch
// failed), DEADLINE_EXCEEDED, CANCELED.
func (p *Proxy) Score(ctx context.Context, req *relevancev1.ScoreRequest) (resp *relevancev1.ScoreResponse, err error) {
	start := time.Now()
	defer func() {
		p.m.requestDuration.WithLabelValues(status.Code(err).String()).Observe(time.Since(start).Seconds())
	}()
	if err := p.validate(req); err != nil {
		return nil, err
	}
	if p.cluster.Closed() {
		return nil, status.Error(codes.Unavailable, "proxy is shutting down")
	}
	// The budget is timeout_ms when set, else the caller's own deadline (a gRPC client's), else
	// the SLO; an earlier caller deadline always wins over timeout_ms.
	var cancel context.CancelFunc = func() {}
	if req.GetTimeoutMs() > 0 {
		ctx, cancel = context.WithTimeout(ctx, time.Duration(req.GetTimeoutMs())*time.Millisecond)
	} else if _, ok := ctx.Deadline(); !ok {
		ctx, cancel = context.WithTimeout(ctx, p.cfg.SLO)
	}
	defer cancel()
	reqID := req.GetRequestId()
	if reqID == "" {
		reqID = newRequestID()
	}

	pl := p.planner.Plan(req, reqID)
	if pl == nil {
		return nil, status.Error(codes.Unavailable, "no healthy scorer node")
	}
	p.m.batchesPerReq.Observe(float64(len(pl.Batches)))
	p.m.imbalance.Observe(pl.Imbalance())

	dl, _ := ctx.Deadline()
	if err := p.admitter.Admit(pl, time.Until(dl)); err != nil {
		pl.Release()
		return nil, err
	}

	partial := p.cfg.OnPartialFailure == PartialPartial || req.GetOptions().GetAllowPartial()
	results, firstErr := p.dispatcher.Run(ctx, pl, !partial)

	return merge.Merge(ctx, merge.Input{Req: req, ReqID: reqID, Plan: pl, Results: results, FirstErr: firstErr, Partial: partial, Start: start})
}

// validate checks req; errors are INVALID_ARGUMENT naming the field.
func (p *Proxy) validate(req *relevancev1.ScoreRequest) error {
	bad := func(format string, args ...any) error { return status.Errorf(codes.InvalidArgument, format, args...) }
	lim := p.cfg.Limits
	switch {
	case req == nil:
		return bad("request: missing")
	case req.GetQuery() == "":
		return bad("query: empty")
	case len(req.GetQuery()) > lim.MaxQueryBytes:
		return bad("query: %d bytes, limit %d", len(req.GetQuery()), lim.MaxQueryBytes)
	case !utf8.ValidString(req.GetQuery()):
		return bad("query: invalid UTF-8")
	case len(req.GetInstruction()) > lim.MaxQueryBytes:
		return bad("instruction: %d bytes, limit %d", len(req.GetInstruction()), lim.MaxQueryBytes)
	case !utf8.ValidString(req.GetInstruction()):
		return bad("instruction: invalid UTF-8")
	case len(req.GetItems()) == 0:
		return bad("items: empty")
	case len(req.GetItems()) > lim.MaxItems:
		return bad("items: %d items, limit %d", len(req.GetItems()), lim.MaxItems)
	case !utf8.ValidString(req.GetRequestId()):
		return bad("request_id: invalid UTF-8")
	}
	for i, it := range req.GetItems() {
		switch {
		case it == nil:
			return bad("items[%d]: missing", i)
		case len(it.GetText()) > lim.MaxItemBytes:
			return bad("items[%d].text: %d bytes, limit %d", i, len(it.GetText()), lim.MaxItemBytes)
		case !utf8.ValidString(it.GetText()):
			return bad("items[%d].text: invalid UTF-8", i)
		case !utf8.ValidString(it.GetId()):
			return bad("items[%d].id: invalid UTF-8", i)
		}
	}
	return nil
}
