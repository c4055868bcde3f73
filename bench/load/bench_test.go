package load

import (
	"context"
	"testing"
	"time"
)

// BenchmarkRecorderAdd is the per-reply bookkeeping every request pays, from many goroutines.
func BenchmarkRecorderAdd(b *testing.B) {
	r := &recorder{}
	r.init()
	b.ReportAllocs()
	b.RunParallel(func(pb *testing.PB) {
		s := sample{at: time.Second, latency: 3 * time.Millisecond, items: 50}
		for pb.Next() {
			r.add(s)
		}
	})
}

// BenchmarkHTTPTargetDo is the client-side cost of one /v1/rerank round trip (50 items)
// against a local server that answers at once: the generator's overhead per request.
func BenchmarkHTTPTargetDo(b *testing.B) {
	srv := rerankServer(b, nil)
	tg := newTarget(b, srv.URL, 4)
	p, err := tg.Prepare(smallTrace(b).At(0))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for b.Loop() {
		if err := tg.Do(context.Background(), p); err != nil {
			b.Fatal(err)
		}
	}
}
