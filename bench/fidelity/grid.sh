#!/usr/bin/env bash
# Split × route grid on 2 emulated nodes replaying the 2-Xeon fidelity profile (§11), one
# `bench compare` per cell so that every cell starts from fresh nodes and a fresh proxy.
#
#   bench/fidelity/grid.sh OUT CONFIGS LOADS [more bench compare flags, e.g. --proxy-config F]
#
# (bench compare --fresh-cells now does the same inside one invocation.)
#
# Why one invocation per cell: bench compare keeps its nodes for every configuration and its
# proxy for every load of one configuration, and the trace restarts at its first request in each
# run. The nodes' prefix caches then hold the earlier configurations' queries (a later
# configuration computed almost no prefix tokens: 0.24 instead of 0.28 node-seconds a request),
# and the proxy's score cache answers the replayed requests of the higher load without a node
# (in §11's "90 %" run about half the requests). Both favour whatever runs later.
#
# Needs the binaries in $BIN (default bin); metrics.py records batches/request, merging and
# prefix work per cell; table.py merges everything into OUT/table.md.
set -euo pipefail
out=$1 configs=$2 loads=$3
shift 3
bin=${BIN:-bin}
cc=$(mktemp)
trap 'rm -f "$cc"' EXIT
sed "s#^bin_dir: .*#bin_dir: $bin#; s#^log_dir: .*#log_dir: ${LOGS:-.cache/cluster}#" configs/local.yaml > "$cc"
dur=${DURATION:-65s}
for l in ${loads//,/ }; do
  for c in ${configs//,/ }; do
    BENCH=$bin/bench bench/fidelity/metrics.py --cluster-config "$cc" --nodes 2 \
      --workload configs/workloads/compare.yaml --configs "$c" --loads "$l" --slo 500ms \
      --duration "$dur" --warmup 5s --cost-profile bench/results/fidelity-2-xeon/profile.json \
      --capacity 5.87 --out "$out/$c-$l" "$@" 2>&1 | grep -E 'compare: \[|metrics:' || true
  done
done
python3 bench/fidelity/table.py "$out" | tee "$out/table.md"
