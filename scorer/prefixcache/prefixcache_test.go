package prefixcache

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
)

func newCache(t testing.TB, budget int64, reg prometheus.Registerer) *Cache {
	t.Helper()
	c, err := New(Options{BudgetBytes: budget, Registerer: reg})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return c
}

func key(i int) Key { return KeyOf("m", []int32{int32(i), 7, 9}) }

func acquire(t testing.TB, e *Epoch, k Key) Lookup {
	t.Helper()
	l, err := e.Acquire(k)
	if err != nil {
		t.Fatalf("Acquire: %v", err)
	}
	return l
}

// publish computes and commits key k with the given size in its own epoch.
func publish(t testing.TB, c *Cache, k Key, v any, size int64) {
	t.Helper()
	e := c.Begin()
	l := acquire(t, e, k)
	if l.Res == nil {
		t.Fatalf("publish: expected a miss for %x, got %+v", k, l)
	}
	l.Res.Fill(v, size)
	e.Commit()
}

func TestNewRejectsBadBudget(t *testing.T) {
	for _, b := range []int64{0, -1} {
		if _, err := New(Options{BudgetBytes: b}); err == nil || !strings.Contains(err.Error(), "budget_bytes") {
			t.Errorf("New(budget=%d) error = %v, want one naming budget_bytes", b, err)
		}
	}
}

func TestKeyOf(t *testing.T) {
	tests := []struct {
		name string
		a, b Key
		same bool
	}{
		{"same input", KeyOf("m", []int32{1, 2}), KeyOf("m", []int32{1, 2}), true},
		{"other tokens", KeyOf("m", []int32{1, 2}), KeyOf("m", []int32{2, 1}), false},
		{"other model", KeyOf("m", []int32{1, 2}), KeyOf("n", []int32{1, 2}), false},
		{"model/token boundary", KeyOf("m\x01", nil), KeyOf("m", []int32{1}), false},
		{"prefix of tokens", KeyOf("m", []int32{1}), KeyOf("m", []int32{1, 0}), false},
	}
	for _, tt := range tests {
		if got := tt.a == tt.b; got != tt.same {
			t.Errorf("%s: equal = %v, want %v", tt.name, got, tt.same)
		}
	}
}

func TestVisibilityFollowsEpoch(t *testing.T) {
	c := newCache(t, 1000, nil)
	k := key(1)
	a := c.Begin()
	l := acquire(t, a, k)
	if l.Res == nil || l.Hit || l.Local {
		t.Fatalf("first acquire = %+v, want a reservation", l)
	}
	// Same epoch, not filled yet: the reservation again, no value.
	if l2 := acquire(t, a, k); l2.Res != l.Res || l2.Value != nil {
		t.Fatalf("same-epoch acquire before Fill = %+v, want the same reservation", l2)
	}
	l.Res.Fill("kv", 10)
	if l2 := acquire(t, a, k); !l2.Local || l2.Value != "kv" {
		t.Fatalf("same-epoch acquire after Fill = %+v, want Local kv", l2)
	}
	// Another epoch does not see the pending entry: it gets its own private reservation.
	b := c.Begin()
	lb := acquire(t, b, k)
	if lb.Res == nil || lb.Res == l.Res || lb.Hit {
		t.Fatalf("other-epoch acquire = %+v, want its own reservation", lb)
	}
	if c.Contains(k) {
		t.Fatal("Contains before Commit = true")
	}
	a.Commit()
	if !c.Contains(k) {
		t.Fatal("Contains after Commit = false")
	}
	// b computed a private copy; committing it keeps a's entry.
	lb.Res.Fill("kv-b", 10)
	if n := b.Commit(); n != 0 {
		t.Errorf("second Commit published %d, want 0", n)
	}
	d := c.Begin()
	if l := acquire(t, d, k); !l.Hit || l.Value != "kv" {
		t.Errorf("after commits = %+v, want Hit with the first epoch's value", l)
	}
	d.Abort()
	if _, err := d.Acquire(k); err != ErrEpochDone {
		t.Errorf("Acquire after Abort err = %v, want ErrEpochDone", err)
	}
	if diff := cmp.Diff(Stats{Entries: 1, Bytes: 10, BudgetBytes: 1000, Hits: 1, Misses: 2}, c.Stats()); diff != "" {
		t.Errorf("Stats (-want +got):\n%s", diff)
	}
}

func TestFailedBatchNeverVisible(t *testing.T) {
	c := newCache(t, 1<<20, nil)
	k := key(5)
	failing := c.Begin()
	l := acquire(t, failing, k)
	l.Res.Fill("partial-kv", 100) // computed, then the pass fails mid-batch
	var wg sync.WaitGroup
	seen := make(chan string, 64)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < 50; i++ {
				e := c.Begin()
				l, err := e.Acquire(k)
				if err != nil {
					seen <- err.Error()
					return
				}
				if l.Hit || l.Local {
					seen <- fmt.Sprint(l.Value)
				}
				e.Abort() // these readers never publish
			}
		}()
	}
	failing.Abort()
	wg.Wait()
	close(seen)
	for v := range seen {
		t.Errorf("another epoch saw %q from a failed batch", v)
	}
	if c.Contains(k) {
		t.Error("failed batch's entry is published")
	}
	failing.Commit() // a late Commit after Abort must not publish
	if c.Contains(k) {
		t.Error("Commit after Abort published the entry")
	}
	if s := c.Stats(); s.Pending != 0 || s.Entries != 0 {
		t.Errorf("Stats after abort = %+v, want no pending and no entries", s)
	}
}

func TestUnfilledReservationDroppedAtCommit(t *testing.T) {
	c := newCache(t, 100, nil)
	e := c.Begin()
	acquire(t, e, key(1))
	if n := e.Commit(); n != 0 {
		t.Errorf("Commit published %d unfilled reservations", n)
	}
	if c.Contains(key(1)) {
		t.Error("unfilled reservation published")
	}
}

func TestLRUAndBudget(t *testing.T) {
	tests := []struct {
		name    string
		budget  int64
		sizes   []int64 // published in order, key i
		touch   []int   // hits after publishing, in order
		extra   int64   // size of one more entry (key 99) published last; 0: none
		want    []int   // keys present at the end
		evicted int64
	}{
		{name: "fits", budget: 100, sizes: []int64{30, 30, 30}, want: []int{0, 1, 2}},
		{name: "oldest goes", budget: 100, sizes: []int64{30, 30, 30}, extra: 30, want: []int{1, 2, 99}, evicted: 1},
		{name: "touched survives", budget: 100, sizes: []int64{30, 30, 30}, touch: []int{0}, extra: 30, want: []int{0, 2, 99}, evicted: 1},
		{name: "big evicts several", budget: 100, sizes: []int64{30, 30, 30}, touch: []int{1}, extra: 60, want: []int{1, 99}, evicted: 2},
		{name: "over budget not kept", budget: 100, sizes: []int64{30}, extra: 101, want: []int{0}},
		{name: "exact budget", budget: 90, sizes: []int64{30, 30, 30}, want: []int{0, 1, 2}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c := newCache(t, tt.budget, nil)
			for i, s := range tt.sizes {
				publish(t, c, key(i), i, s)
			}
			for _, i := range tt.touch {
				e := c.Begin()
				if l := acquire(t, e, key(i)); !l.Hit {
					t.Fatalf("touch %d: not a hit", i)
				}
				e.Commit()
			}
			if tt.extra > 0 {
				publish(t, c, key(99), 99, tt.extra)
			}
			gotSet := map[int]bool{}
			for _, i := range append([]int{99}, keysUpTo(len(tt.sizes))...) {
				if c.Contains(key(i)) {
					gotSet[i] = true
				}
			}
			want := map[int]bool{}
			for _, i := range tt.want {
				want[i] = true
			}
			if diff := cmp.Diff(want, gotSet); diff != "" {
				t.Errorf("present keys (-want +got):\n%s", diff)
			}
			s := c.Stats()
			if s.Bytes > tt.budget {
				t.Errorf("bytes %d over budget %d", s.Bytes, tt.budget)
			}
			if s.Evictions != tt.evicted {
				t.Errorf("evictions = %d, want %d", s.Evictions, tt.evicted)
			}
		})
	}
}

func keysUpTo(n int) []int {
	ks := make([]int, n)
	for i := range ks {
		ks[i] = i
	}
	return ks
}

func TestHammer(t *testing.T) {
	c := newCache(t, 2000, nil)
	const goroutines, rounds, keys = 16, 300, 40
	var wg sync.WaitGroup
	errs := make(chan error, goroutines)
	for g := 0; g < goroutines; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for r := 0; r < rounds; r++ {
				e := c.Begin()
				fail := (g+r)%5 == 0
				for j := 0; j < 3; j++ {
					k := key((g*7 + r*3 + j) % keys)
					l, err := e.Acquire(k)
					if err != nil {
						errs <- err
						return
					}
					switch {
					case l.Hit || l.Local:
						if s, ok := l.Value.(string); !ok || strings.HasPrefix(s, "bad") {
							errs <- fmt.Errorf("read %v: a failed batch's value leaked", l.Value)
							return
						}
					case l.Res != nil:
						v := "good"
						if fail {
							v = "bad"
						}
						l.Res.Fill(v, 100)
					}
				}
				if fail {
					e.Abort()
				} else {
					e.Commit()
				}
				_ = c.Stats()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	s := c.Stats()
	if s.Bytes > 2000 || s.Pending != 0 || s.Entries*100 != int(s.Bytes) {
		t.Errorf("final stats inconsistent: %+v", s)
	}
}

func TestMetricsLint(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	c := newCache(t, 100, reg)
	publish(t, c, key(1), 1, 60)
	publish(t, c, key(2), 2, 60) // evicts key 1
	e := c.Begin()
	acquire(t, e, key(2))
	for _, k := range []Key{key(2), key(3)} { // a template hit, a template miss
		if _, err := e.AcquireAt(LevelTemplate, k); err != nil {
			t.Fatal(err)
		}
	}
	e.Commit()
	problems, err := testutil.GatherAndLint(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Errorf("lint %s: %s", p.Metric, p.Text)
	}
	want := `
# HELP relevance_scorer_prefix_cache_entries Published prefix entries.
# TYPE relevance_scorer_prefix_cache_entries gauge
relevance_scorer_prefix_cache_entries 1
# HELP relevance_scorer_prefix_cache_evictions_total Published prefix entries evicted to stay within the memory budget.
# TYPE relevance_scorer_prefix_cache_evictions_total counter
relevance_scorer_prefix_cache_evictions_total 1
# HELP relevance_scorer_prefix_cache_hits_total Prefix lookups served from a published cache entry.
# TYPE relevance_scorer_prefix_cache_hits_total counter
relevance_scorer_prefix_cache_hits_total 1
# HELP relevance_scorer_prefix_cache_misses_total Prefix lookups that had to compute the prefix.
# TYPE relevance_scorer_prefix_cache_misses_total counter
relevance_scorer_prefix_cache_misses_total 2
# HELP relevance_scorer_prefix_cache_template_hits_total Template (template head + instruction) lookups served from a published cache entry, after the whole prefix missed.
# TYPE relevance_scorer_prefix_cache_template_hits_total counter
relevance_scorer_prefix_cache_template_hits_total 1
# HELP relevance_scorer_prefix_cache_template_misses_total Template (template head + instruction) lookups that had to compute the template.
# TYPE relevance_scorer_prefix_cache_template_misses_total counter
relevance_scorer_prefix_cache_template_misses_total 1
# HELP relevance_scorer_prefix_cache_bytes Bytes of published prefix entries.
# TYPE relevance_scorer_prefix_cache_bytes gauge
relevance_scorer_prefix_cache_bytes 60
`
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}

// TestLevelsCountedApart: template lookups count in TemplateHits/TemplateMisses, whole-prefix
// lookups in Hits/Misses; entries of both levels share the store (a template published by one
// epoch is a whole-prefix hit for the same tokens: same key, same KV).
func TestLevelsCountedApart(t *testing.T) {
	c := newCache(t, 1000, nil)
	e := c.Begin()
	l, err := e.AcquireAt(LevelTemplate, key(1))
	if err != nil || l.Res == nil {
		t.Fatalf("template miss: %+v, %v", l, err)
	}
	l.Res.Fill("template", 10)
	acquire(t, e, key(2)).Res.Fill("prefix", 10)
	e.Commit()
	e = c.Begin()
	if l, _ := e.AcquireAt(LevelTemplate, key(1)); !l.Hit || l.Value != "template" {
		t.Errorf("template lookup after commit: %+v", l)
	}
	if l := acquire(t, e, key(2)); !l.Hit {
		t.Errorf("prefix lookup after commit: %+v", l)
	}
	e.Commit()
	s := c.Stats()
	if s.Hits != 1 || s.Misses != 1 || s.TemplateHits != 1 || s.TemplateMisses != 1 || s.Entries != 2 {
		t.Errorf("stats %+v: want 1 hit and 1 miss per level, 2 entries", s)
	}
	if _, err := c.Begin().AcquireAt(Level(7), key(1)); err == nil {
		t.Error("unknown level accepted")
	}
}

// TestSharedEpochFill: an epoch shared by several goroutines (one fills a reservation while
// another looks the key up) is race-free, and a Fill after the epoch ended publishes nothing.
func TestSharedEpochFill(t *testing.T) {
	c := newCache(t, 1000, nil)
	e := c.Begin()
	k := key(1)
	res := acquire(t, e, k).Res
	if res == nil {
		t.Fatal("expected a reservation")
	}
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		res.Fill("kv", 10)
	}()
	go func() {
		defer wg.Done()
		for {
			l := acquire(t, e, k)
			if l.Local {
				if l.Value != "kv" {
					t.Errorf("local value = %v", l.Value)
				}
				return
			}
			if l.Res != res {
				t.Errorf("unfilled lookup = %+v, want the epoch's own reservation", l)
				return
			}
		}
	}()
	wg.Wait()
	e.Commit()
	if !c.Contains(k) {
		t.Fatal("filled reservation not published")
	}

	late := c.Begin()
	r2 := acquire(t, late, key(2)).Res
	late.Abort()
	r2.Fill("after abort", 10)
	late2 := c.Begin()
	r3 := acquire(t, late2, key(3)).Res
	late2.Commit()
	r3.Fill("after commit", 10)
	if c.Contains(key(2)) || c.Contains(key(3)) {
		t.Error("a Fill after the epoch ended was published")
	}
	if s := c.Stats(); s.Entries != 1 || s.Bytes != 10 || s.Pending != 0 {
		t.Errorf("stats = %+v", s)
	}
}
