package serve

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/valyala/fasthttp"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/relevance-scoring/relevance/internal/fakenode"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
	"github.com/relevance-scoring/relevance/proxy"
)

// BenchmarkOverhead measures the whole proxy's overhead (fronts + real core) against calling a
// zero-latency fake node directly, for one request of 100 items of ~400 bytes, sequential calls
// over loopback: direct Scorer.ScoreBatch (the whole request as one batch), gRPC Ranker.Score and
// HTTP POST /v2/rerank through the proxy (split over 4 fake nodes). It reports p50/p99.
//
//	go test -run '^$' -bench BenchmarkOverhead -benchtime 2000x ./proxy/front/serve
func BenchmarkOverhead(b *testing.B) {
	nodes, err := fakenode.StartCluster(4, fakenode.Options{Parallel: true})
	if err != nil {
		b.Fatal(err)
	}
	defer nodes.Close()
	query := "fresh organic apples"
	doc := strings.Repeat("Organic green apples, crisp and sweet, 1 kg bag. ", 8)
	docs := make([]string, 100)
	items := make([]*relevancev1.Item, len(docs))
	for i := range docs {
		docs[i] = fmt.Sprintf("%d %s", i, doc)
		items[i] = &relevancev1.Item{Text: docs[i]}
	}

	cfg := DefaultConfig()
	cfg.HTTP.Addr, cfg.GRPC.Addr = "127.0.0.1:0", "127.0.0.1:0"
	cfg.Proxy.Nodes.Static = nodes.Addrs()
	cfg.Proxy.SLO = 5 * time.Second // measure overhead, not admission under a loaded CI box
	ctx, cancel := context.WithCancel(context.Background())
	type addrs struct{ http, grpc string }
	listening := make(chan addrs, 1)
	ready := make(chan *proxy.Proxy, 1)
	done := make(chan error, 1)
	go func() {
		done <- Run(ctx, cfg, Options{
			NewCore: func(c proxy.Config, reg prometheus.Registerer, log *slog.Logger) (Core, error) {
				p, err := proxy.New(c, reg, log)
				ready <- p
				return testAdapter{p}, err
			},
			Registry:  prometheus.NewRegistry(),
			Listening: func(h, g net.Addr) { listening <- addrs{h.String(), g.String()} },
		})
	}()
	a := <-listening
	p := <-ready
	defer func() {
		cancel()
		if err := <-done; err != nil {
			b.Error(err)
		}
	}()
	wctx, wcancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer wcancel()
	if err := p.WaitReady(wctx); err != nil {
		b.Fatal(err)
	}

	measure := func(b *testing.B, call func() error) {
		b.Helper()
		for range 50 { // warm connections and the cost learner
			if err := call(); err != nil {
				b.Fatal(err)
			}
		}
		lat := make([]time.Duration, 0, b.N)
		b.ResetTimer()
		for b.Loop() {
			start := time.Now()
			if err := call(); err != nil {
				b.Fatal(err)
			}
			lat = append(lat, time.Since(start))
		}
		b.StopTimer()
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(float64(lat[len(lat)/2].Microseconds()), "p50-µs")
		b.ReportMetric(float64(lat[len(lat)*99/100].Microseconds()), "p99-µs")
	}
	dial := func(addr string) *grpc.ClientConn {
		c, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			b.Fatal(err)
		}
		return c
	}

	b.Run("direct-node-grpc", func(b *testing.B) {
		conn := dial(nodes[0].Addr())
		defer conn.Close()
		c := relevancev1.NewScorerClient(conn)
		measure(b, func() error {
			_, err := c.ScoreBatch(context.Background(), &relevancev1.ScoreBatchRequest{Query: query, Items: items})
			return err
		})
	})
	b.Run("proxy-grpc", func(b *testing.B) {
		conn := dial(a.grpc)
		defer conn.Close()
		c := relevancev1.NewRankerClient(conn)
		measure(b, func() error {
			_, err := c.Score(context.Background(), &relevancev1.ScoreRequest{Query: query, Items: items})
			return err
		})
	})
	b.Run("proxy-http-v2-rerank", func(b *testing.B) {
		body, _ := json.Marshal(map[string]any{"model": "rerank", "query": query, "documents": docs, "top_n": 10})
		client := &fasthttp.Client{}
		defer client.CloseIdleConnections()
		req, resp := fasthttp.AcquireRequest(), fasthttp.AcquireResponse()
		defer fasthttp.ReleaseRequest(req)
		defer fasthttp.ReleaseResponse(resp)
		measure(b, func() error {
			req.Reset()
			req.SetRequestURI("http://" + a.http + "/v2/rerank")
			req.Header.SetMethod("POST")
			req.Header.SetContentType("application/json")
			req.SetBody(body)
			if err := client.Do(req, resp); err != nil {
				return err
			}
			if resp.StatusCode() != 200 {
				return fmt.Errorf("status %d: %s", resp.StatusCode(), resp.Body())
			}
			return nil
		})
	})
}
