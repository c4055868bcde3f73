package admit

import (
	"math"
	"testing"
	"time"

	"github.com/relevance-scoring/relevance/proxy/cluster"
)

// A node can report an absurd but finite backlog (cluster.Node.Observe accepts any finite
// value), or a plan's finish can be NaN: the RetryInfo delay must stay non-negative and bounded.
func TestRetryDelayNeverNegativeForAbsurdProjection(t *testing.T) {
	n := new(cluster.Node)
	for _, finish := range []float64{1e10, 1e12, math.NaN()} {
		a := New(Config{Headroom: 1, MinSamples: 0}, nil, nil)
		err := a.Admit(planOf(10, bt{n, finish, 0.1}), 500*time.Millisecond)
		if err == nil {
			t.Errorf("finish %v: admitted", finish)
			continue
		}
		if d := retryDelay(t, err); d < 0 {
			t.Errorf("finish %v: RetryInfo delay %v, want >= 0", finish, d)
		}
	}
}
