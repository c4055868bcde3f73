package calibrate

import (
	"context"
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
	if err != nil && len(samples) < 8 {
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
