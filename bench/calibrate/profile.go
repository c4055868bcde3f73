package calibrate

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"runtime"
	"strings"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/relevance-scoring/relevance/costmodel"
	relevancev1 "github.com/relevance-scoring/relevance/proto/relevance/v1"
)

// Result is a calibration: the profile to write and what it was fitted from.
type Result struct {
	Profile  costmodel.Profile
	Fit      Fit
	Samples  []Sample
	Emulated bool // the measured node was itself emulated (only useful for testing the tool)
}

// Run measures the node at addr (host:port, gRPC) and fits a profile. threads is recorded in
// the profile (the node's compute threads, as the caller started it; 0 if unknown).
func Run(ctx context.Context, addr string, threads int, o Options) (*Result, error) {
	cc, err := grpc.NewClient(addr, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(64<<20), grpc.MaxCallSendMsgSize(64<<20)))
	if err != nil {
		return nil, fmt.Errorf("calibrate %s: %w", addr, err)
	}
	defer cc.Close()
	samples, model, emulated, err := Measure(ctx, relevancev1.NewScorerClient(cc), o)
	// Measure gives up when too many batches fail; the samples it has then lack the shapes that
	// failed (the slow ones, past the batch timeout), so a fit of them would price the node too
	// cheap. Only an interrupted run (ctx cancelled) keeps what it measured, if that is enough.
	if err != nil && (ctx.Err() == nil || len(samples) < 8) {
		return nil, fmt.Errorf("calibrate %s: %w", addr, err)
	}
	fit, ferr := FitSamples(samples)
	if ferr != nil {
		return nil, fmt.Errorf("calibrate %s: %w", addr, ferr)
	}
	p := costmodel.Profile{
		Coeffs:     fit.Coeffs,
		NoiseSigma: fit.Sigma,
		Model:      model,
		Machine:    Machine(),
		Threads:    threads,
		MeasuredAt: time.Now().UTC().Format(time.RFC3339),
		Samples:    len(samples),
		R2:         fit.R2,
		Measured:   MeasuredShapes(samples),
	}
	if p.NoiseSigma > 3 {
		p.NoiseSigma = 3
	}
	if verr := p.Validate(); verr != nil {
		return nil, fmt.Errorf("calibrate %s: fitted profile invalid: %w", addr, verr)
	}
	return &Result{Profile: p, Fit: fit, Samples: samples, Emulated: emulated}, nil
}

// Machine describes this host: CPU model, logical CPUs and OS/arch.
func Machine() string {
	cpu := ""
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for _, l := range strings.Split(string(b), "\n") {
			if strings.HasPrefix(l, "model name") {
				if _, v, ok := strings.Cut(l, ":"); ok {
					cpu = strings.TrimSpace(v)
					break
				}
			}
		}
	}
	if cpu == "" {
		cpu = "unknown CPU"
	}
	return fmt.Sprintf("%s, %d logical CPUs, %s/%s", cpu, runtime.NumCPU(), runtime.GOOS, runtime.GOARCH)
}

// MeasuredShapes groups samples by designed shape (and prefix-cache state) into the profile's
// measured shapes, every repetition's seconds kept in measurement order, shapes in order of
// first measurement. A shape's token counts are its first repetition's (repetitions of one
// shape differ by a few tokens: their texts are drawn anew).
func MeasuredShapes(samples []Sample) []costmodel.MeasuredShape {
	type key struct {
		sh     Shape
		cached bool
	}
	idx := map[key]int{}
	var out []costmodel.MeasuredShape
	for _, s := range samples {
		k := key{s.Shape, s.PrefixCached}
		i, ok := idx[k]
		if !ok {
			i = len(out)
			idx[k] = i
			out = append(out, costmodel.MeasuredShape{PrefixTokens: s.PrefixTokens, ItemTokens: append([]int(nil), s.ItemTokens...), PrefixCached: s.PrefixCached})
		}
		out[i].Seconds = append(out[i].Seconds, s.Seconds)
	}
	return out
}

// LoadSamples reads the samples a calibration wrote (`bench calibrate --samples FILE`).
func LoadSamples(path string) ([]Sample, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load samples: %w", err)
	}
	var s []Sample
	if err := json.Unmarshal(b, &s); err != nil {
		return nil, fmt.Errorf("load samples %s: %w", path, err)
	}
	return s, nil
}

// FromSamples builds a samples profile from a calibration's samples: base's coefficients and
// description when base is given (the profile the same run wrote), else a fit of the samples,
// with every sample kept as measured shapes (Profile.Measured).
func FromSamples(samples []Sample, base *costmodel.Profile) (*costmodel.Profile, error) {
	if len(samples) == 0 {
		return nil, errors.New("samples profile: no samples")
	}
	var p costmodel.Profile
	if base != nil {
		p = *base
	} else {
		fit, err := FitSamples(samples)
		if err != nil {
			return nil, fmt.Errorf("samples profile: %w", err)
		}
		p = costmodel.Profile{Coeffs: fit.Coeffs, NoiseSigma: min(fit.Sigma, 3), Samples: len(samples), R2: fit.R2}
	}
	p.Measured = MeasuredShapes(samples)
	if err := p.Validate(); err != nil {
		return nil, fmt.Errorf("samples profile: %w", err)
	}
	return &p, nil
}
