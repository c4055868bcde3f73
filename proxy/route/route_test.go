package route_test

import (
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/proxy/route"
	"github.com/relevance-scoring/relevance/proxy/route/leastloaded"
	"github.com/relevance-scoring/relevance/proxy/route/random"
	"github.com/relevance-scoring/relevance/proxy/route/roundrobin"
)

// seeded is a deterministic, goroutine-safe route.Rand.
func seeded(seed uint64) route.Rand {
	var mu sync.Mutex
	r := rand.New(rand.NewPCG(seed, seed+1))
	return func(n int) int {
		mu.Lock()
		defer mu.Unlock()
		return r.IntN(n)
	}
}

func TestEmptyCandidates(t *testing.T) {
	for _, p := range []route.Picker{random.New(nil), roundrobin.New(0), leastloaded.New(0, nil)} {
		if got := p.Pick(route.Slice{}); got != -1 {
			t.Errorf("%T.Pick(empty) = %d, want -1", p, got)
		}
	}
}

func TestRoundRobin(t *testing.T) {
	p := roundrobin.New(0)
	var got []int
	for range 7 {
		got = append(got, p.Pick(route.Slice{0, 0, 0}))
	}
	if d := cmp.Diff([]int{0, 1, 2, 0, 1, 2, 0}, got); d != "" {
		t.Errorf("sequence (-want +got):\n%s", d)
	}
}

func TestRandomCoversAll(t *testing.T) {
	p := random.New(seeded(1))
	counts := make([]int, 4)
	for range 4000 {
		counts[p.Pick(route.Slice{5, 0, 0, 9})]++
	}
	for i, c := range counts {
		if c < 800 || c > 1200 {
			t.Errorf("candidate %d picked %d/4000 times, want ~1000", i, c)
		}
	}
}

func TestLeastLoadedFullScan(t *testing.T) {
	tests := []struct {
		name  string
		loads route.Slice
		want  []int // acceptable picks
	}{
		{"single", route.Slice{3}, []int{0}},
		{"min", route.Slice{3, 1, 2}, []int{1}},
		{"ties", route.Slice{1, 0, 0, 5, 0}, []int{1, 2, 4}},
	}
	p := leastloaded.New(8, seeded(2))
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			seen := map[int]bool{}
			for range 300 {
				got := p.Pick(tt.loads)
				seen[got] = true
				ok := false
				for _, w := range tt.want {
					ok = ok || got == w
				}
				if !ok {
					t.Fatalf("picked %d, want one of %v", got, tt.want)
				}
			}
			if len(seen) != len(tt.want) {
				t.Errorf("ties broken unevenly: saw %v, want all of %v", seen, tt.want)
			}
		})
	}
}

func TestLeastLoadedPowerOfTwo(t *testing.T) {
	loads := make(route.Slice, 64)
	for i := range loads {
		loads[i] = float64(i)
	}
	p := leastloaded.New(8, seeded(3))
	counts := make([]int, 64)
	for range 20000 {
		counts[p.Pick(loads)]++
	}
	if counts[63] != 0 {
		t.Errorf("the most loaded of 64 was picked %d times; two choices never pick the max", counts[63])
	}
	// P(pick i) = 2(63-i)/(64·63): the least loaded about 2/64 of the time.
	if counts[0] < 400 || counts[0] > 850 {
		t.Errorf("least loaded picked %d/20000, want ~625", counts[0])
	}
}

func BenchmarkLeastLoaded(b *testing.B) {
	for _, n := range []int{8, 64} {
		loads := make(route.Slice, n)
		p := leastloaded.New(8, nil)
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				p.Pick(loads)
			}
		})
	}
}
