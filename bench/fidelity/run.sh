#!/usr/bin/env bash
# Fidelity of the emulated node (issue 12, item 4): one trace against 2 real scorer nodes (one
# compute thread each) and against 2 emulated nodes replaying those nodes' own measured profile.
#
#   bench/fidelity/run.sh real OUT      calibrate a real node, write OUT/profile.json, run the trace on 2 real nodes
#   bench/fidelity/run.sh emulated OUT  the same trace (same arrival rates) on 2 emulated nodes from OUT/profile.json
#
# Needs bin/ (make build). The two halves are separate so that each stays under ten minutes.
#
# --fresh-cells: every (configuration, load) cell starts on fresh nodes and a fresh proxy. Without
# it §11 was biased (bench/results/README.md §11b): the nodes' prefix caches kept the first
# configuration's queries for the second, which then computed almost no prefix tokens, and the
# proxy's score cache answered the 90 % run's replay of the 50 % run's requests without a node
# (about half of the "90 %" requests).
set -euo pipefail
mode=$1 out=$2
mkdir -p "$out"
M=models/small-qwen3_moe-seed1
common=(--nodes 2 --workload configs/workloads/compare.yaml --configs cost+least_loaded,fixed+random
        --loads 0.5,0.9 --slo 500ms --duration 30s --warmup 5s --fresh-cells)
case $mode in
real)
  [ -f "$M/config.json" ] || bin/scorer gen-model --arch qwen3_moe --preset small --seed 1 --out "$M"
  bin/scorer serve --model "$M" --threads 1 --grpc-addr 127.0.0.1:7391 --http-addr 127.0.0.1:7392 > "$out/calibrate-node.log" 2>&1 &
  pid=$!
  trap 'kill $pid 2>/dev/null || true' EXIT
  for _ in $(seq 120); do curl -sf 127.0.0.1:7392/readyz > /dev/null && break; sleep 0.5; done
  bin/bench calibrate --node 127.0.0.1:7391 --threads 1 --budget 60s --v=false \
    --samples "$out/calibrate-samples.json" --out "$out/calibrate.json" > "$out/calibrate.log" 2>&1
  kill $pid; wait $pid 2>/dev/null || true; trap - EXIT
  bin/bench calibrate --from-samples "$out/calibrate-samples.json" --profile "$out/calibrate.json" --out "$out/profile.json"
  bin/bench compare --real "${common[@]}" --probe-duration 15s --out "$out/real" 2>&1 | tail -25
  ;;
emulated)
  cap=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['capacity_rps'])" "$out/real/results.json")
  bin/bench compare "${common[@]}" --cost-profile "$out/profile.json" --capacity "$cap" --out "$out/emulated" 2>&1 | tail -25
  ;;
*) echo "usage: $0 real|emulated OUT" >&2; exit 2 ;;
esac
