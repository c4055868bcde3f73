package proxy

import (
	"context"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/merge"
	"github.com/relevance-scoring/relevance/proxy/request"
)

// Score scores every item of req against its query across the nodes. It reads as the pipeline's
// stages: validate (package request), plan (token counts, batches, each placed on a node with its projected finish;
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
	if err := request.Validate(req, request.Limits{MaxItems: p.cfg.Limits.MaxItems, MaxItemBytes: p.cfg.Limits.MaxItemBytes, MaxQueryBytes: p.cfg.Limits.MaxQueryBytes}); err != nil {
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
