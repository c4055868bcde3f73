#!/usr/bin/env bash
# The headline on real nodes (issue 12, item 5) and its emulated twin (item 4, fidelity), on one
# trace: every split × route configuration at 50/70/90 % of the real cluster's measured capacity,
# at least MIN_REQ (300) measured requests per cell, every cell on fresh nodes and a fresh proxy.
#
#   [BIN=dir] [CLUSTER=cluster.yaml] [CONFIGS=…] [LOADS=…] [MIN_REQ=n] bench/fidelity/headline.sh OUT [real|emulated|both]
#
# real:     calibrate one real 1-thread node (OUT/profile.json, its measured samples), measure the
#           capacity of 2 real nodes (closed-loop probe), then run every cell on 2 real nodes.
# emulated: the same cells, arrival rates and trace on 2 emulated nodes replaying OUT/profile.json.
#
# Each (load, configuration) cell is its own `bench compare` run (bench/fidelity/metrics.py records
# the proxy's and the nodes' metrics beside it), loads outer and configurations inner, so that a
# drift of the machine over the hour spreads over every configuration instead of favouring one.
# A cell runs long enough for MIN_REQ arrivals at its rate (+10 %, Poisson).
#
# Run it on an otherwise quiet machine (as root: nice -n -10 bench/fidelity/headline.sh …; other
# work at nice 19 then takes only idle CPU). Needs bin/ (make build).
set -euo pipefail
out=$1 mode=${2:-both}
mkdir -p "$out"
bin=${BIN:-bin}
M=models/small-qwen3_moe-seed1
CONFIGS=${CONFIGS:-cost+least_loaded,cost+round_robin,cost+random,fixed+least_loaded,fixed+round_robin,fixed+random}
LOADS=${LOADS:-0.5,0.7,0.9}
SLO=${SLO:-1s}
MIN_REQ=${MIN_REQ:-300}
WARMUP=5
common=(--nodes 2 --workload configs/workloads/compare.yaml --slo "$SLO" --warmup "${WARMUP}s" --fresh-cells)
# CLUSTER: a cluster config whose bin_dir holds the binaries under test (default: configs/local.yaml,
# bin/), e.g. to compare two builds side by side without rebuilding bin/.
[ -n "${CLUSTER:-}" ] && common+=(--cluster-config "$CLUSTER")

cells() { # $1: real|emulated, then extra bench compare flags
  local kind=$1 cap
  shift
  cap=$(cat "$out/capacity")
  for l in ${LOADS//,/ }; do
    local dur
    dur=$(python3 -c "import math,sys; l,c,n,w=map(float,sys.argv[1:]); print(int(w+math.ceil(1.1*n/(l*c))))" "$l" "$cap" "$MIN_REQ" "$WARMUP")
    for c in ${CONFIGS//,/ }; do
      [ -f "$out/$kind/$c-$l/metrics.json" ] && continue # resumable
      BENCH=$bin/bench python3 bench/fidelity/metrics.py "${common[@]}" --configs "$c" --loads "$l" \
        --duration "${dur}s" --capacity "$cap" --cost-profile "$out/profile.json" \
        --out "$out/$kind/$c-$l" "$@" 2>&1 | grep -E 'compare: \[' || true
    done
  done
  python3 bench/fidelity/table.py "$out/$kind" | tee "$out/$kind/table.md"
}

if [ "$mode" = real ] || [ "$mode" = both ]; then
  [ -f "$M/config.json" ] || $bin/scorer gen-model --arch qwen3_moe --preset small --seed 1 --out "$M"
  if [ ! -f "$out/profile.json" ]; then
    $bin/scorer serve --model "$M" --threads 1 --grpc-addr 127.0.0.1:7391 --http-addr 127.0.0.1:7392 > "$out/calibrate-node.log" 2>&1 &
    pid=$!
    trap 'kill $pid 2>/dev/null || true' EXIT
    for _ in $(seq 120); do curl -sf 127.0.0.1:7392/readyz > /dev/null && break; sleep 0.5; done
    $bin/bench calibrate --node 127.0.0.1:7391 --threads 1 --budget 60s --v=false \
      --samples "$out/calibrate-samples.json" --out "$out/calibrate.json" > "$out/calibrate.log" 2>&1
    kill $pid; wait $pid 2>/dev/null || true; trap - EXIT
    $bin/bench calibrate --from-samples "$out/calibrate-samples.json" --profile "$out/calibrate.json" --out "$out/profile.json"
  fi
  if [ ! -f "$out/capacity" ]; then
    # A near-empty run whose closed-loop probe (30 s) measures the capacity every cell is a share
    # of (its own run is too short to measure anything, and may exit non-zero for it).
    $bin/bench compare --real "${common[@]}" --configs cost+least_loaded --loads 0.1 --duration 6s \
      --probe-duration 30s --cost-profile "$out/profile.json" --out "$out/probe" 2>&1 | grep -E 'compare: capacity' || true
    python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['capacity_rps'])" "$out/probe/results.json" > "$out/capacity"
  fi
  cells real --real
fi
if [ "$mode" = emulated ] || [ "$mode" = both ]; then
  cells emulated
fi
