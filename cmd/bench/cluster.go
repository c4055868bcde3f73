package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/relevance-scoring/relevance/bench/cluster"
	"github.com/relevance-scoring/relevance/internal/cli"
)

func runCluster(args []string) error {
	fs := cli.NewFlagSet("bench", "cluster", "[--config configs/local.yaml] [--emulated N --cost-profile F] [flags]")
	cfgPath := fs.String("config", "configs/local.yaml", "cluster config (YAML); empty for built-in defaults")
	emulated := fs.Int("emulated", 0, "run N emulated scorer nodes instead of the real model (needs --cost-profile)")
	profile := fs.String("cost-profile", "bench/results/profile-small-auto-samples.json", "cost profile of emulated nodes (with measured samples: replayed, not the fitted formula)")
	nodes := fs.Int("nodes", 0, "number of real nodes (overrides nodes.count)")
	threads := fs.Int("threads", 0, "compute threads per real node (overrides nodes.threads)")
	split := fs.String("split", "", "proxy split strategy: fixed or cost (overrides proxy.split)")
	route := fs.String("route", "", "proxy routing: random, round_robin, least_loaded or prefix_affinity (overrides proxy.route)")
	hedge := fs.Bool("hedge", false, "proxy hedging on or off (overrides proxy.hedge when given)")
	selfTest := fs.Bool("self-test", true, "send a /v1/rerank request of its own (not the printed example, which it would leave in the score cache) once before printing the examples")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return fmt.Errorf("unexpected arguments %q", fs.Args())
	}
	cfg, err := cluster.LoadConfig(*cfgPath)
	if err != nil {
		return err
	}
	for name, v := range map[string]int{"--emulated": *emulated, "--nodes": *nodes, "--threads": *threads} {
		if v < 0 {
			return fmt.Errorf("%s must be ≥ 0, got %d", name, v)
		}
	}
	if *emulated > 0 {
		cfg.Nodes.Engine = "emulated"
		cfg.Nodes.Count = *emulated
		cfg.Nodes.CostProfile = *profile
		// 16–64 nodes: let the OS pick ports rather than demand a contiguous free range.
		cfg.Nodes.GRPCBasePort, cfg.Nodes.HTTPBasePort = 0, 0
	}
	if *nodes > 0 {
		cfg.Nodes.Count = *nodes
	}
	if *threads > 0 {
		cfg.Nodes.Threads = *threads
	}
	if *split != "" {
		cfg.Proxy.Split = *split
	}
	if *route != "" {
		cfg.Proxy.Route = *route
	}
	fs.Visit(func(f *flag.Flag) { // given on the command line, either way, it beats the file
		if f.Name == "hedge" {
			cfg.Proxy.Hedge = *hedge
		}
	})
	if err := cfg.Validate(); err != nil {
		return err
	}
	label := ""
	if cfg.Emulated() {
		label = "EMULATED "
		if _, err := os.Stat(cfg.Nodes.CostProfile); err != nil {
			return fmt.Errorf("--cost-profile: %w", err)
		}
	}
	say := func(format string, a ...any) { fmt.Fprintf(os.Stderr, label+format+"\n", a...) }

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGHUP)
	defer stop()
	c, err := cluster.New(cfg, os.Stderr)
	if err != nil {
		return err
	}
	defer func() {
		// Signals go back to their default first: a second Ctrl-C during the stop's grace
		// periods (the proxy's, then the nodes') ends the command at once.
		stop()
		say("cluster: stopping…")
		c.Stop()
		say("cluster: stopped")
	}()
	// interrupted: a Ctrl-C (or SIGTERM) while starting is the user's choice, not a failure.
	interrupted := func(err error) error {
		if ctx.Err() != nil {
			say("cluster: interrupted while starting")
			return nil
		}
		return err
	}
	if !cfg.Emulated() {
		if err := c.EnsureModel(ctx); err != nil {
			return interrupted(err)
		}
	}
	start := time.Now()
	engine := "model " + cfg.Model.Dir
	if cfg.Emulated() {
		engine = "emulated engine, cost profile " + cfg.Nodes.CostProfile
	}
	say("cluster: starting %d scorer nodes (%s; logs in %s) …", cfg.Nodes.Count, engine, cfg.LogDir)
	if err := c.StartNodes(ctx); err != nil {
		return interrupted(fmt.Errorf("start nodes: %w", err))
	}
	say("cluster: nodes ready after %v: %s", time.Since(start).Round(100*time.Millisecond), strings.Join(c.NodeAddrs(), " "))
	if err := c.StartProxy(ctx, cfg.Proxy, "proxy"); err != nil {
		return interrupted(fmt.Errorf("start proxy: %w", err))
	}
	say("cluster: proxy ready: HTTP %s, gRPC %s (split=%s route=%s hedge=%v)", cfg.Proxy.HTTPAddr, cfg.Proxy.GRPCAddr,
		orDefault(cfg.Proxy.Split), orDefault(cfg.Proxy.Route), cfg.Proxy.Hedge)
	if *selfTest {
		// A failed self-test is reported, not fatal: the cluster is up and its logs and
		// /v1/nodes are what the user needs to see why.
		if got, err := cluster.SelfTest(ctx, cfg.Proxy.HTTPAddr, 2*time.Minute); err != nil {
			say("cluster: WARNING: the /v1/rerank example failed: %v", err)
		} else {
			say("cluster: self-test /v1/rerank OK: %s", got)
		}
	}
	fmt.Printf("\n%s", cluster.Examples(cfg.Proxy.HTTPAddr, cfg.Proxy.GRPCAddr, cfg.Proxy.SLO, cfg.Emulated()))
	fmt.Fprintln(os.Stderr)
	say("cluster: running; a node that dies is restarted; Ctrl-C stops everything.")
	return c.Supervise(ctx)
}

func orDefault(s string) string {
	if s == "" {
		return "default"
	}
	return s
}
