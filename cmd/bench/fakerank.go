package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/cli"
	"github.com/relevance-scoring/relevance/internal/fakerank"
	"github.com/relevance-scoring/relevance/prompt"
)

// runFakerank is `bench fakerank`: one fake rerank server (internal/fakerank) whose calls take
// what a measured cost profile of our engine predicts, behind a FIFO queue of --concurrency
// slots. EMULATED: the server's API, our engine's speed. Serves until SIGTERM or SIGINT.
func runFakerank(args []string) error {
	fs := cli.NewFlagSet("bench", "fakerank", "--kind vllm [--addr 127.0.0.1:0] [--cost-profile F] [--concurrency 1] [flags]")
	kind := fs.String("kind", "", "server API to fake: one of "+strings.Join(fakerank.Kinds(), ", ")+"; required")
	addr := fs.String("addr", "127.0.0.1:0", "listen address host:port (port 0: any free port; the chosen address is printed)")
	profile := fs.String("cost-profile", "bench/results/profile-small-auto.json", "cost profile: each call takes a·tokens + b·pairs + c (the call is one batch, its query prefix computed once) times the profile's log-normal noise")
	concurrency := fs.Int("concurrency", 1, "calls processed at a time, as a GPU server's scheduler; the rest wait in a FIFO queue (0: no limit)")
	counter := fs.String("token-counter", prompt.CountExact, "how the latency counts a call's tokens: exact (the shipped Qwen3 tokenizer, as our emulated scorer node) or estimate (the proxy's default planning estimate)")
	seed := fs.Uint64("seed", 1, "seed of the latency noise")
	model := fs.String("model", "", `served model name (replies, metric labels; a request naming another gets 404); "" means fake-reranker`)
	maxItems := fs.Int("max-items", 0, "documents per request (TEI, Infinity; 0: the kind's default)")
	maxTokens := fs.Int("max-tokens", 0, "tokens per pair, counted as bytes/4 (llama.cpp n_ubatch, vLLM --max-model-len, …; 0: the kind's default)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	if fakerank.HealthPath(*kind) == "" {
		return fmt.Errorf("--kind: must be one of %s, got %q", strings.Join(fakerank.Kinds(), ", "), *kind)
	}
	if *concurrency < 0 {
		return fmt.Errorf("--concurrency must be ≥ 0, got %d", *concurrency)
	}
	prof, err := costmodel.LoadProfile(*profile)
	if err != nil {
		return fmt.Errorf("--cost-profile: %w", err)
	}
	c, err := prompt.NewCounter(*counter)
	if err != nil {
		return fmt.Errorf("--token-counter: %w", err)
	}
	lat, err := fakerank.ProfileLatency(prof, fakerank.ProfileOptions{Counter: c, Seed: *seed})
	if err != nil {
		return err
	}
	s, err := fakerank.Start(*kind, fakerank.Options{Addr: *addr, Concurrency: *concurrency, Latency: lat, Model: *model,
		MaxItems: *maxItems, MaxTokens: *maxTokens})
	if err != nil {
		return err
	}
	queue := fmt.Sprintf("%d at a time, FIFO queue", *concurrency)
	if *concurrency == 0 {
		queue = "no limit"
	}
	fmt.Fprintf(os.Stderr, "EMULATED fakerank: a fake %s API (internal/fakerank) whose calls take the cost profile %s: a=%.3g s/token, b=%.3g s/pair, c=%.3g s/call, noise σ=%.3g (formula; tokens by prompt's %s counter); concurrency %s\n",
		*kind, *profile, prof.A, prof.B, prof.C, prof.NoiseSigma, *counter, queue)
	fmt.Printf("EMULATED fakerank %s listening on %s\n", *kind, s.Addr())
	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	began := time.Now()
	<-ctx.Done()
	s.Close()
	fmt.Fprintf(os.Stderr, "EMULATED fakerank %s on %s: stopped after %v, %d rerank calls\n", *kind, s.Addr(), time.Since(began).Round(time.Second), s.Calls())
	return nil
}
