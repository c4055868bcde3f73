package node

// Fault injection: with Config.FaultInjection (`scorer serve --fault-injection`), GET and POST
// /debug/fault on the HTTP port make the node misbehave on purpose — slow, stalled or failing —
// so that a fault suite (`bench faults`) can test the proxy against such a node without a real
// bad device. Off by default: the route is then not registered (404) and the scheduler has no
// hook. The faults act where a real device's would: a slowdown and a stall inside the
// scheduler's pass (so later batches queue behind it, and the node's learned speed and every
// NodeLoad see a slow device), a failure at the ScoreBatch call. A test's in-process Script
// (script.go) hooks in at the same places, plus the queued cost the node reports.

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
	"unicode"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/relevance-scoring/relevance/internal/sleep"
	pb "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/scorer"
)

// reasonInjected counts the ScoreBatch calls failed by fault injection in
// relevance_scorer_errors_total.
const reasonInjected = "injected"

// Fault is the injected state: the JSON of GET /debug/fault, and of POST /debug/fault, where a
// field left out keeps its current value (so `{"fail_next": 3}` leaves a slowdown in place).
type Fault struct {
	// Slowdown multiplies every forward pass's time: after a pass of d (the engine's own measure
	// of it, else the wall time) the node waits (Slowdown−1)·d more before answering. 0 or 1:
	// none; otherwise ≥ 1.
	Slowdown float64 `json:"slowdown"`
	// Stall holds every pass, before it starts, until it is cleared (or the pass's callers have
	// all gone).
	Stall bool `json:"stall"`
	// FailNext fails that many of the next ScoreBatch calls with FailCode, before any work.
	FailNext int `json:"fail_next"`
	// FailCode is the gRPC code name (UNAVAILABLE, RESOURCE_EXHAUSTED, INTERNAL, …) of those
	// failures; "" means UNAVAILABLE.
	FailCode string `json:"fail_code"`
}

// faultPatch is a POST body: nil fields are left as they are.
type faultPatch struct {
	Slowdown *float64 `json:"slowdown"`
	Stall    *bool    `json:"stall"`
	FailNext *int     `json:"fail_next"`
	FailCode *string  `json:"fail_code"`
}

// faults is a node's injected-fault state. Safe for concurrent use; the methods the hot path
// calls accept a nil *faults (injection off) and then do nothing.
type faults struct {
	log *slog.Logger
	// sleep waits d or until ctx is done; tests replace it to run on a fake clock.
	sleep func(ctx context.Context, d time.Duration) error

	script Script // a test's hooks (SetScript): set before Start, read-only after

	mu      sync.Mutex
	f       Fault
	code    codes.Code    // FailCode parsed
	changed chan struct{} // closed and replaced on every change (wakes stalled passes)
}

func newFaults(log *slog.Logger) *faults {
	return &faults{log: log, sleep: sleep.Context, f: Fault{Slowdown: 1, FailCode: codeName(codes.Unavailable)},
		code: codes.Unavailable, changed: make(chan struct{})}
}

// get returns the current state.
func (fl *faults) get() Fault {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	return fl.f
}

// apply validates p and applies it whole, or not at all; the error names the field.
func (fl *faults) apply(p faultPatch) (Fault, error) {
	fl.mu.Lock()
	defer fl.mu.Unlock()
	f, code := fl.f, fl.code
	if p.Slowdown != nil {
		switch v := *p.Slowdown; {
		case v == 0:
			f.Slowdown = 1
		case !(v >= 1) || v > 1e6:
			return fl.f, fmt.Errorf("fault.slowdown: must be 0 (none) or in [1, 1e6], got %v", v)
		default:
			f.Slowdown = v
		}
	}
	if p.Stall != nil {
		f.Stall = *p.Stall
	}
	if p.FailNext != nil {
		if *p.FailNext < 0 {
			return fl.f, fmt.Errorf("fault.fail_next: must be ≥ 0, got %d", *p.FailNext)
		}
		f.FailNext = *p.FailNext
	}
	if p.FailCode != nil {
		c := codes.Unavailable
		if *p.FailCode != "" {
			if err := c.UnmarshalJSON([]byte(strconv.Quote(*p.FailCode))); err != nil || c == codes.OK {
				return fl.f, fmt.Errorf("fault.fail_code: must be a gRPC code name other than OK (UNAVAILABLE, RESOURCE_EXHAUSTED, INTERNAL, …), got %q", *p.FailCode)
			}
		}
		f.FailCode, code = codeName(c), c
	}
	fl.f, fl.code = f, code
	close(fl.changed)
	fl.changed = make(chan struct{})
	return f, nil
}

// codeName is c's canonical name as gRPC's JSON spells it (UNAVAILABLE, RESOURCE_EXHAUSTED).
func codeName(c codes.Code) string {
	var b strings.Builder
	for i, r := range c.String() {
		if i > 0 && unicode.IsUpper(r) {
			b.WriteByte('_')
		}
		b.WriteRune(unicode.ToUpper(r))
	}
	if c == codes.Canceled {
		return "CANCELLED"
	}
	return b.String()
}

// failCall takes one of FailNext: the error to fail this ScoreBatch call with, or nil. A
// script's OnCall runs first, on every call.
func (fl *faults) failCall() error {
	if fl == nil {
		return nil
	}
	if f := fl.script.OnCall; f != nil {
		if err := f(); err != nil {
			return err
		}
	}
	fl.mu.Lock()
	defer fl.mu.Unlock()
	if fl.f.FailNext == 0 {
		return nil
	}
	fl.f.FailNext--
	return status.Errorf(fl.code, "injected fault (fail_next, %d left)", fl.f.FailNext)
}

// failBatch is the error a script's OnBatch fails this validated request with, or nil.
func (fl *faults) failBatch(req *pb.ScoreBatchRequest) error {
	if fl == nil || fl.script.OnBatch == nil {
		return nil
	}
	return fl.script.OnBatch(req)
}

// reportedLoad is a script's phantom backlog in seconds (0 without one).
func (fl *faults) reportedLoad() float64 {
	if fl == nil || fl.script.ReportedLoad == nil {
		return 0
	}
	return fl.script.ReportedLoad()
}

// holdStall blocks while Stall is set, until it is cleared or ctx is done.
func (fl *faults) holdStall(ctx context.Context) error {
	for {
		fl.mu.Lock()
		stall, ch := fl.f.Stall, fl.changed
		fl.mu.Unlock()
		if !stall {
			return nil
		}
		select {
		case <-ch:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// faultyForward is the scheduler's pass with the injected faults: a stall holds it before it
// starts; a slowdown k waits (k−1) times the pass's time after it and reports the pass as k times
// as long, as a device k times slower would. Without injection it is forward.
func (s *scheduler) faultyForward(ctx context.Context, eng scorer.Engine, groups []*scorer.Group) (scorer.ForwardStats, error) {
	fl := s.fault
	if fl == nil {
		return s.forward(ctx, eng, groups)
	}
	if err := fl.holdStall(ctx); err != nil {
		return scorer.ForwardStats{}, err
	}
	start := s.now()
	st, err := s.forward(ctx, eng, groups)
	if err != nil {
		return st, err
	}
	k := fl.get().Slowdown
	if k <= 1 {
		return st, nil
	}
	d := st.Duration
	if d <= 0 {
		d = s.now().Sub(start)
	}
	// A pass whose callers have all gone (or a stopping node) ends the wait: nobody waits for it.
	if err := fl.sleep(ctx, time.Duration(float64(d)*(k-1))); err != nil {
		return st, err
	}
	if st.Duration > 0 {
		st.Duration = time.Duration(float64(st.Duration) * k)
	}
	return st, nil
}

// register adds GET and POST /debug/fault to mux.
func (fl *faults) register(mux *http.ServeMux) {
	mux.HandleFunc("GET /debug/fault", func(w http.ResponseWriter, _ *http.Request) {
		writeFault(w, http.StatusOK, fl.get())
	})
	mux.HandleFunc("POST /debug/fault", func(w http.ResponseWriter, r *http.Request) {
		var p faultPatch
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&p); err != nil {
			writeFaultError(w, fmt.Errorf("fault: bad JSON body: %w", err))
			return
		}
		f, err := fl.apply(p)
		if err != nil {
			writeFaultError(w, err)
			return
		}
		if fl.log != nil {
			fl.log.Warn("fault injection changed", "slowdown", f.Slowdown, "stall", f.Stall, "fail_next", f.FailNext, "fail_code", f.FailCode)
		}
		writeFault(w, http.StatusOK, f)
	})
}

func writeFault(w http.ResponseWriter, code int, f Fault) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(f)
}

func writeFaultError(w http.ResponseWriter, err error) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusBadRequest)
	_ = json.NewEncoder(w).Encode(map[string]string{"error": err.Error()})
}
