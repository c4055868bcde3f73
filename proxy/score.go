package proxy

import (
	"context"
	"errors"
	"slices"
	"strings"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy/dispatch"
	"github.com/relevance-scoring/relevance/proxy/merge"
	"github.com/relevance-scoring/relevance/proxy/modelpin"
	"github.com/relevance-scoring/relevance/proxy/plan"
	"github.com/relevance-scoring/relevance/proxy/request"
)

// Score scores every item of req against its query across the nodes. It reads as the pipeline's
// stages: validate (package request), plan (token counts, batches, each placed on a node with its projected finish;
// package plan), admit (package admit), dispatch (package dispatch), merge (package merge).
//
// Errors are gRPC status errors: INVALID_ARGUMENT (the message names the field),
// RESOURCE_EXHAUSTED with RetryInfo (admission), UNAVAILABLE (no node can serve, a batch
// failed, or the model changed under a client request pinned to one: see modelpin),
// DEADLINE_EXCEEDED, CANCELED.
func (p *Proxy) Score(ctx context.Context, req *relevancev1.ScoreRequest) (resp *relevancev1.ScoreResponse, err error) {
	start := time.Now()
	defer func() {
		p.m.requestDuration.WithLabelValues(status.Code(err).String()).Observe(time.Since(start).Seconds())
		if err == nil {
			// Counted with the reply: a request refused or failed after its lookup answered none.
			p.m.cacheHits.Add(float64(resp.GetUsage().GetCachedItems()))
		}
	}()
	if err := request.Validate(req, request.Limits{MaxItems: p.cfg.Limits.MaxItems, MaxItemBytes: p.cfg.Limits.MaxItemBytes, MaxQueryBytes: p.cfg.Limits.MaxQueryBytes}); err != nil {
		return nil, err
	}
	if err := p.checkModel(req.GetModel()); err != nil {
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

	// The model: the cluster's, unless an earlier core call of the same client request (a front
	// that makes several, see modelpin) pinned another; this call is pinned to it, and the first
	// call with a known model pins it for the later ones. Each call picking the cluster's model
	// on its own would mix two models' scores in one reply when a rolling update flips it.
	pin := modelpin.FromContext(ctx)
	cfp := p.cluster.Fingerprint()
	fp := pin.Hold(cfp)
	if fp != cfp {
		if _, served := p.cluster.ModelOf(fp); !served {
			return nil, status.Errorf(codes.Unavailable, "the model changed during the request: no node serves fingerprint %s, which it began with, any more; retry", fp)
		}
	}

	// Cache: the items scored before under that model are answered here; the rest go through
	// the pipeline as a request of their own.
	look := p.lookup(req, fp)
	if look.misses == 0 {
		return p.fromCache(req, reqID, look, start), nil
	}
	sub := look.sub(req)

	planned := time.Now()
	pl := p.planner.Plan(sub, reqID, fp)
	if pl == nil {
		return nil, status.Error(codes.Unavailable, "no healthy scorer node")
	}
	p.m.batchesPerReq.Observe(float64(len(pl.Batches)))
	p.m.imbalance.Observe(pl.Imbalance())

	dl, _ := ctx.Deadline()
	budget := time.Until(dl)
	if err := p.admitter.Admit(pl, budget); err != nil {
		// Before refusing, unless admission.replan is off, the plan that finishes this request
		// first (more, smaller batches): at moderate load the largest requests' economical plans
		// land just past the budget while a faster one fits.
		pl.Release()
		var urgent *plan.Plan
		if p.cfg.Admission.Replan {
			urgent = p.planner.Urgent(sub, reqID, fp)
		}
		// The faster plan must fit well inside the budget (admission.replan_fit): it is tried
		// exactly when the economical one did not, so a fast plan that barely fits is borderline
		// work under overload.
		fit := time.Duration(float64(time.Until(dl)) * p.cfg.Admission.ReplanFit)
		refuse := func(outcome string) (*relevancev1.ScoreResponse, error) {
			if outcome != "" {
				p.m.replans.WithLabelValues(outcome).Inc()
			}
			if urgent != nil {
				urgent.Release()
			}
			p.admitter.Count(err)
			return nil, err
		}
		switch {
		case urgent == nil:
			return refuse("")
		case len(urgent.Batches) <= len(pl.Batches):
			return refuse(replanNoFiner)
		case p.admitter.Admit(urgent, fit) != nil:
			return refuse(replanRefused)
		}
		p.m.replans.WithLabelValues(replanAdmitted).Inc()
		pl = urgent
	}

	partial := p.cfg.OnPartialFailure == PartialPartial || sub.GetOptions().GetAllowPartial()
	projected := pl.Finish() // read before Run, which takes the leases it is computed from
	results, firstErr := p.dispatcher.Run(ctx, pl, !partial)
	if f := projected; f > 0 && pl.MinSamples >= int64(p.cfg.Admission.MinSamples) && !errors.Is(ctx.Err(), context.Canceled) {
		// A request that ran into its deadline counts too: its time is a lower bound, and
		// leaving it out would show admission more accurate than it is.
		p.m.requestRatio.Observe(time.Since(planned).Seconds() / f)
		// Admission's promise, judged: answered in time, or late. Other failures (a node lost
		// with no retry left) say nothing about the projection.
		if late, judged := lateness(ctx, results, f, budget.Seconds()); judged {
			p.admitter.Outcome(late)
		}
	}
	served, err := oneModel(fp, results)
	if err != nil {
		return nil, err
	}
	if pinned := pin.Hold(served); served != "" && pinned != served {
		// Planned before any node's model was known, while another call of the request was
		// served by another model.
		return nil, status.Errorf(codes.Unavailable, "the model changed during the request (fingerprints %s and %s); retry", pinned, served)
	}

	resp, err = merge.Merge(ctx, merge.Input{Req: sub, ReqID: reqID, Plan: pl, Results: results, FirstErr: firstErr, Partial: partial, Start: start})
	if err != nil {
		return nil, err
	}
	p.fill(req, served, look, resp, unidentified(served, pl, results, len(sub.GetItems())))
	resp = look.splice(req, resp)
	if p.cfg.Model.Name != "" {
		resp.Model = p.cfg.Model.Name
	}
	return resp, nil
}

// lateness says whether a request whose batches ended with results ran late: its deadline
// passed, or a batch ended DEADLINE_EXCEEDED (a node refused it as unable to finish in time, or
// it ran out of time) — even one whose request goes on with partial results, or a piece of a
// batch cut to a node's item limit (dispatch.Result.ItemErrs). judged is false when that says
// nothing about admission's margin: a batch was lost to a node failure, or a node was counted
// slow for one (a fault: outlier detection's business), or the request was late although its
// plan left it more than half the budget (projected is the plan's finish, budget the time it
// had): an error of 2× and more is a fault, which no margin short of refusing everything covers.
func lateness(ctx context.Context, results []dispatch.Result, projected, budget float64) (late, judged bool) {
	answered, fault := true, false
	deadline := errors.Is(ctx.Err(), context.DeadlineExceeded)
	for _, r := range results {
		fault = fault || r.Slow
		// A batch's error, or those of the failed pieces of a batch cut and answered in part.
		for _, err := range append([]error{r.Err}, r.ItemErrs...) {
			switch {
			case err == nil:
			case status.Code(err) == codes.DeadlineExceeded || errors.Is(err, context.DeadlineExceeded):
				deadline = true
			default:
				answered = false
			}
		}
	}
	switch {
	case !deadline:
		return false, answered && !fault
	case fault || 2*projected < budget:
		return true, false
	}
	return true, true
}

// unidentified marks the items (of the request the plan was made for, n of them) whose batch was
// answered without the served model's fingerprint. A scorer node always reports one (dispatch
// retries a batch answered with another), but in a mixed cluster a server of another kind
// (vLLM, TEI, …) reports none: its scores may go into the reply, as the operator mixed the
// cluster, but they are not the served model's to replay from the cache under its identity. nil
// when every batch carried it.
func unidentified(served string, pl *plan.Plan, results []dispatch.Result, n int) []bool {
	var out []bool
	for bi, r := range results {
		if r.Resp == nil || r.Resp.GetModelFingerprint() == served || bi >= len(pl.Batches) {
			continue
		}
		if out == nil {
			out = make([]bool, n)
		}
		for _, i := range pl.Batches[bi].Items {
			if i < n {
				out[i] = true
			}
		}
	}
	return out
}

// oneModel is the model fingerprint the batches were answered with. A request pinned to a
// fingerprint (pinned != "") only got replies of it (dispatch retries the others); one planned
// before any node reported a fingerprint fails UNAVAILABLE if its batches came from two models
// (a rolling update under it): its scores must not be mixed.
func oneModel(pinned string, results []dispatch.Result) (string, error) {
	if pinned != "" {
		return pinned, nil
	}
	fp := ""
	for _, r := range results {
		f := r.Resp.GetModelFingerprint()
		switch {
		case f == "":
		case fp == "":
			fp = f
		case f != fp:
			return "", status.Errorf(codes.Unavailable, "the model changed while the request was served (fingerprints %s and %s); retry", fp, f)
		}
	}
	return fp, nil
}

// ServedModels lists the names a request's model may give: the configured name, or else the
// names the nodes report (known once a node has answered), then the configured aliases. GET
// /v1/models lists them, so that a client can discover the name to send. Safe for concurrent use.
func (p *Proxy) ServedModels() []string {
	served := p.cluster.Models()
	if p.cfg.Model.Name != "" {
		served = []string{p.cfg.Model.Name}
	}
	for _, a := range p.cfg.Model.Aliases {
		if !slices.Contains(served, a) {
			served = append(served, a)
		}
	}
	return served
}

// checkModel answers a request for a model this proxy does not serve as vLLM does: NOT_FOUND,
// "The model `x` does not exist.", here with the served names. An empty name, the served name
// and its aliases pass; with no configured name, the names the nodes report are the served ones,
// and before any node has answered every name passes (there is nothing to check against yet).
func (p *Proxy) checkModel(name string) error {
	if name == "" || name == p.cfg.Model.Name || slices.Contains(p.cfg.Model.Aliases, name) {
		return nil
	}
	served := p.cluster.Models()
	if p.cfg.Model.Name != "" {
		served = []string{p.cfg.Model.Name}
	} else if len(served) == 0 || slices.Contains(served, name) {
		return nil
	}
	return status.Errorf(codes.NotFound, "The model `%s` does not exist. Served: %s", name, strings.Join(append(served, p.cfg.Model.Aliases...), ", "))
}
