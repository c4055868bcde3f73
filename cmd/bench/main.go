// Command bench is the load-test and measurement tool. See `bench --help`.
package main

import (
	"os"

	"github.com/relevance-scoring/relevance/internal/cli"
)

func main() {
	os.Exit(cli.Dispatch("bench", "load tests, comparisons, calibration and kernel benchmarks", os.Args[1:], []cli.Command{
		{Name: "load", Summary: "open- or closed-loop load against a proxy (HTTP or gRPC)", Run: runLoad},
		{Name: "compare", Summary: "run one trace against several proxy configurations and tabulate", Run: runCompare},
		{Name: "calibrate", Summary: "measure a real scorer node and write a cost profile for emulation", Run: runCalibrate},
		{Name: "fakerank", Summary: "serve one fake rerank server (vLLM, SGLang, …) timed by a cost profile (EMULATED)", Run: runFakerank},
		{Name: "cluster", Summary: "start a local proxy and scorer nodes (what make run does)", Run: runCluster},
		{Name: "kernels", Summary: "benchmark GEMM and MoE kernel variants and policies", Run: runKernels},
		{Name: "faults", Summary: "fault suite: node loss, slow nodes, overload, SIGTERM, malformed input, memory (PASS/FAIL each)", Run: runFaults},
	}))
}
