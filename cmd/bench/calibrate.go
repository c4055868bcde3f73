package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"syscall"
	"time"

	"github.com/relevance-scoring/relevance/bench/calibrate"
	"github.com/relevance-scoring/relevance/bench/report"
	"github.com/relevance-scoring/relevance/costmodel"
	"github.com/relevance-scoring/relevance/internal/cli"
)

func runCalibrate(args []string) error {
	fs := cli.NewFlagSet("bench", "calibrate", "--node HOST:PORT [--out profile.json] [flags]  |  --from-samples samples.json [--profile p.json] --out profile.json")
	node := fs.String("node", "", "scorer node gRPC address (host:port); required")
	out := fs.String("out", "profile.json", "where to write the cost profile (JSON)")
	repeats := fs.Int("repeats", 2, "times each batch shape is sent")
	budget := fs.Duration("budget", 10*time.Minute, "time limit for the measurements (the shape order is shuffled, so a cut run still covers the grid)")
	threads := fs.Int("threads", 0, "the node's compute threads, recorded in the profile (0: unknown)")
	quick := fs.Bool("quick", false, "a smaller design (2×2×2 shapes) for a fast check")
	samplesOut := fs.String("samples", "", "also write the raw samples as JSON to this file")
	seed := fs.Uint64("seed", 1, "seed of the batch texts and order")
	verbose := fs.Bool("v", true, "print one line per batch")
	nodePID := fs.Int("node-pid", 0, "time batches by this local node process's CPU time (Linux) instead of its wall time: for a one-thread node on a machine shared with other work")
	fromSamples := fs.String("from-samples", "", "measure nothing: build a samples profile (coefficients + every measured batch, replayed by emulated nodes) from the samples a calibration wrote (--samples), with --profile's coefficients when given, else a fit of the samples")
	baseProfile := fs.String("profile", "", "with --from-samples: the profile the same calibration wrote, whose coefficients and description are kept")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *fromSamples != "" {
		return convertSamples(*fromSamples, *baseProfile, *out)
	}
	if *node == "" {
		return fmt.Errorf("--node is required (a scorer's gRPC host:port)")
	}
	if *repeats < 1 {
		return fmt.Errorf("--repeats must be ≥ 1, got %d", *repeats)
	}
	o := calibrate.Options{Repeats: *repeats, Budget: *budget, Seed: *seed}
	if *quick {
		for _, q := range []int{3, 80} {
			for _, n := range []int{1, 8} {
				for _, l := range []int{48, 256} {
					o.Shapes = append(o.Shapes, calibrate.Shape{QueryWords: q, Items: n, ItemTokens: l})
				}
			}
		}
	}
	if *nodePID > 0 {
		o.CPUTime = calibrate.ProcessCPUTime(*nodePID)
	}
	if *verbose {
		o.Log = os.Stderr
	} else {
		o.Log = io.Discard
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	res, err := calibrate.Run(ctx, *node, *threads, o)
	if err != nil {
		return err
	}
	if *nodePID > 0 {
		p := &res.Profile
		p.Machine += fmt.Sprintf("; timed by node CPU time (pid %d), load average at the end %s", *nodePID, loadAvg())
	}
	label := ""
	if res.Emulated {
		label = "EMULATED node (not a real model): "
	}
	p := res.Profile
	if err := os.MkdirAll(filepath.Dir(*out), 0o755); err != nil {
		return err
	}
	if err := p.Save(*out); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	if *samplesOut != "" {
		if err := report.WriteJSON(*samplesOut, res.Samples); err != nil {
			return err
		}
	}
	fmt.Printf("%scalibrated %s (%s) from %d batches\n", label, *node, p.Model, p.Samples)
	fmt.Printf("  a = %.4g s/token   b = %.4g s/pair   c = %.4g s/batch\n", p.A, p.B, p.C)
	fmt.Printf("  noise σ(log) = %.3f   R² = %.4f   max |rel err| = %.1f%%\n", p.NoiseSigma, p.R2, 100*res.Fit.MaxRelErr)
	fmt.Printf("  e.g. 20 items × 250 tokens after a 60-token prefix: %.0f ms\n", 1000*exampleCost(p.Coeffs))
	fmt.Printf("wrote %s\n", *out)
	return nil
}

// exampleCost is the profile's prediction for 20 items of 250 tokens after a 60-token prefix.
func exampleCost(c costmodel.Coeffs) float64 {
	items := make([]int, 20)
	for i := range items {
		items[i] = 250
	}
	return c.Seconds(costmodel.BatchFeatures(60, items, false))
}

// convertSamples writes a samples profile built from a calibration's samples file (and the
// profile fitted with them, when given).
func convertSamples(samplesPath, profilePath, out string) error {
	samples, err := calibrate.LoadSamples(samplesPath)
	if err != nil {
		return err
	}
	var base *costmodel.Profile
	if profilePath != "" {
		if base, err = costmodel.LoadProfile(profilePath); err != nil {
			return err
		}
	}
	p, err := calibrate.FromSamples(samples, base)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		return err
	}
	if err := p.Save(out); err != nil {
		return fmt.Errorf("write profile: %w", err)
	}
	fmt.Printf("samples profile: %d shapes, %d measured batches, a = %.4g b = %.4g c = %.4g\nwrote %s\n",
		len(p.Measured), p.Repetitions(), p.A, p.B, p.C, out)
	return nil
}
