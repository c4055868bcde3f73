package admit

import (
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/proxy/cluster"
)

// TestDeadlineRetryBudgetIsEnough: the deadline RetryInfo is "the budget the request needs";
// converting it to a Duration truncates, so resent with exactly that budget the request can be
// refused again (0.1 s + 0.2 s of work is 0.30000000000000004 s; the RetryInfo says 300ms).
func TestDeadlineRetryBudgetIsEnough(t *testing.T) {
	n := new(cluster.Node)
	p := planOf(10, bt{n, 0, 0.1}, bt{n, 0.1, 0.2})
	a := New(Config{Headroom: 1, MinSamples: 10}, nil, nil)
	err := a.Admit(p, 200*time.Millisecond)
	if r, ok := err.(*Rejection); !ok || r.reason != ReasonDeadline {
		t.Fatalf("%v, want a deadline refusal", err)
	}
	need := retryDelay(t, err)
	if err := a.Admit(p, need); err != nil {
		t.Errorf("RetryInfo says the request needs a %v budget, but with it it is refused again: %v", need, err)
	}
}
