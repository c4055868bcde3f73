package httpapi

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/valyala/fasthttp"
)

// BenchmarkFront measures the HTTP front's own cost per request (decode, copy, call a zero-latency
// fake core, rank, encode) over loopback with a keep-alive fasthttp client, for M documents of
// ~400 bytes. It reports p50/p99 latency besides ns/op.
//
//	go test -run '^$' -bench BenchmarkFront -benchtime 2000x ./proxy/front/httpapi
func BenchmarkFront(b *testing.B) {
	for _, tc := range []struct {
		path string
		docs int
	}{{"/v2/rerank", 100}, {"/v1/rerank", 100}, {"/v1/score", 100}, {"/v2/rerank", 1000}} {
		b.Run(fmt.Sprintf("%s/docs=%d", strings.TrimPrefix(tc.path, "/"), tc.docs), func(b *testing.B) {
			e := startServer(b, DefaultConfig(), newFakeCore(), nil)
			body := benchBody(tc.path, tc.docs)
			client := &fasthttp.Client{}
			req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
			defer fasthttp.ReleaseRequest(req)
			defer fasthttp.ReleaseResponse(resp)
			lat := make([]time.Duration, 0, b.N)
			b.SetBytes(int64(len(body)))
			b.ResetTimer()
			for b.Loop() {
				req.Reset()
				req.SetRequestURI(e.base + tc.path)
				req.Header.SetMethod("POST")
				req.Header.SetContentType("application/json")
				req.SetBody(body)
				start := time.Now()
				if err := client.Do(req, resp); err != nil {
					b.Fatal(err)
				}
				lat = append(lat, time.Since(start))
				if resp.StatusCode() != 200 {
					b.Fatalf("status %d: %s", resp.StatusCode(), resp.Body())
				}
			}
			b.StopTimer()
			client.CloseIdleConnections()
			sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
			b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
			b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
		})
	}
}

func benchBody(path string, n int) []byte {
	doc := strings.Repeat("Organic green apples, crisp and sweet, 1 kg bag. ", 8)
	docs := make([]string, n)
	for i := range docs {
		docs[i] = fmt.Sprintf("%d %s", i, doc)
	}
	var v any = map[string]any{"model": "rerank-v3.5", "query": "fresh apples", "documents": docs, "top_n": 10}
	if path == "/v1/score" {
		items := make([]map[string]string, n)
		for i, d := range docs {
			items[i] = map[string]string{"id": fmt.Sprint(i), "text": d}
		}
		v = map[string]any{"query": "fresh apples", "items": items, "top_n": 10}
	}
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	return b
}

// BenchmarkParseRerank isolates request decoding (no network), 1000 documents of ~400 bytes.
//
//	go test -run '^$' -bench BenchmarkParseRerank ./proxy/front/httpapi
func BenchmarkParseRerank(b *testing.B) {
	body := benchBody("/v2/rerank", 1000)
	b.SetBytes(int64(len(body)))
	b.ReportAllocs()
	for b.Loop() {
		if _, _, _, err := parseRerank(body, 0); err != nil {
			b.Fatal(err)
		}
	}
}
