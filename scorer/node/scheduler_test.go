package node

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/relevance-scoring/relevance/scorer"
)

// TestMergeKeepsEarlierDeadlines: merging a queued batch into the head's pass must not make the
// head miss a deadline it meets alone.
func TestMergeKeepsEarlierDeadlines(t *testing.T) {
	tests := []struct {
		name     string
		deadline time.Duration // head's deadline from now; 0: none
		want     []int         // groups per pass
	}{
		{"no deadline merges", 0, []int{2}},
		{"loose deadline merges", 3 * time.Hour, []int{2}},
		{"merge would miss the head's deadline", 90 * time.Minute, []int{1, 1}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			f := newFake()
			f.started = nil
			f.secPerToken = 600 // each batch below is 6 tokens: an hour alone, two merged
			s := newScheduler(1000, 10)
			t0 := time.Now()
			s.now = func() time.Time { return t0 }
			ctxA, cancel := context.WithCancel(context.Background())
			if tc.deadline > 0 {
				ctxA, cancel = context.WithDeadline(context.Background(), t0.Add(tc.deadline))
			}
			defer cancel()
			var jobs []*job
			for i, ctx := range []context.Context{ctxA, context.Background()} {
				g, err := f.Tokenize("", string(rune('a'+i)), []string{"dd"}, scorer.TokenizeOptions{})
				if err != nil {
					t.Fatal(err)
				}
				if err := s.admit(); err != nil {
					t.Fatal(err)
				}
				j, err := s.submit(ctx, f, g)
				if err != nil {
					t.Fatal(err)
				}
				jobs = append(jobs, j)
			}
			s.start(f, nil)
			defer s.stop()
			for i, j := range jobs {
				if r := <-j.done; r.err != nil {
					t.Errorf("job %d: %v", i, r.err)
				}
			}
			if diff := cmp.Diff(tc.want, f.passCounts()); diff != "" {
				t.Errorf("groups per pass (-want +got):\n%s", diff)
			}
		})
	}
}

// TestQueueKeepsNoFinishedJobs: the queue's backing array holds no references to jobs that left
// it (each holds a batch's tokens and its caller's context).
func TestQueueKeepsNoFinishedJobs(t *testing.T) {
	f := newFake()
	f.started = nil
	s := newScheduler(1000, 10)
	var jobs []*job
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 4 {
		g, _ := f.Tokenize("", string(rune('a'+i)), []string{"doc"}, scorer.TokenizeOptions{})
		if err := s.admit(); err != nil {
			t.Fatal(err)
		}
		c := context.Background()
		if i == 1 {
			c = ctx
		}
		j, err := s.submit(c, f, g)
		if err != nil {
			t.Fatal(err)
		}
		jobs = append(jobs, j)
	}
	s.remove(jobs[1]) // a caller that left while queued
	s.start(f, nil)
	defer s.stop()
	for i, j := range jobs {
		if i == 1 {
			continue
		}
		if r := <-j.done; r.err != nil {
			t.Fatal(r.err)
		}
	}
	waitSched(t, s, "idle", func(l loadSnapshot) bool { return l.InflightBatches == 0 })
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, q := range s.queue[:cap(s.queue)] {
		if q != nil {
			t.Errorf("queue backing array slot %d still holds a job", i)
		}
	}
}
