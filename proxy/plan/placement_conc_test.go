package plan

import (
	"slices"
	"sync"
	"testing"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/route/leastloaded"
)

// TestConcurrentPlacementsAreQueuedBehindEachOther: requests placed at the same moment on one
// node are queued by it one after another, so their leases' projected slots [Start, Finish)
// must not overlap. lease() reads Start with Node.Load and charges with Node.Charge in two
// steps: two placements that interleave both start at the same backlog, and admission is told
// both finish at the time only one can.
func TestConcurrentPlacementsAreQueuedBehindEachOther(t *testing.T) {
	c := startCluster(t, 1)
	p := NewPlacer(c, leastloaded.New(0, route.DefaultRand))
	f := costmodel.BatchFeatures(50, []int{100, 100, 100, 100}, false)
	overlaps := 0
	for range 300 {
		var mu sync.Mutex
		var ls []*Lease
		var wg sync.WaitGroup
		start := make(chan struct{})
		for range 4 {
			wg.Go(func() {
				<-start
				l := p.Place(Work{Features: f}, nil)
				mu.Lock()
				ls = append(ls, l)
				mu.Unlock()
			})
		}
		close(start)
		wg.Wait()
		slices.SortFunc(ls, func(a, b *Lease) int {
			switch {
			case a.Start < b.Start:
				return -1
			case a.Start > b.Start:
				return 1
			}
			return 0
		})
		for i := 1; i < len(ls); i++ {
			if ls[i].Start < ls[i-1].Finish-ls[i-1].Predicted/2 { // slack: the clock moves between placements
				overlaps++
			}
		}
		for _, l := range ls {
			l.Release()
		}
	}
	if overlaps > 0 {
		t.Errorf("%d concurrent placements on one node were projected to run at the same time as another", overlaps)
	}
}
