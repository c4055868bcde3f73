#!/usr/bin/env bash
# Cross-check bin/bench load against wrk: the same request body, the same fixed concurrency
# (closed loop, which is what wrk does), alternating runs; medians of throughput and p50 must
# agree within 10 %.
#
# usage: bench/crosscheck.sh [TARGET_URL] [CONCURRENCY] [SECONDS] [ROUNDS]
#   TARGET_URL  default http://127.0.0.1:8080/v1/rerank (the proxy of `make run`)
#   workload    WORKLOAD=configs/workloads/fixed.yaml (one body: 50 items × ~200 tokens)
# Writes its raw outputs to ${OUT:-.cache/crosscheck}/ and exits non-zero when they disagree.
set -euo pipefail
cd "$(dirname "$0")/.."
TARGET=${1:-http://127.0.0.1:8080/v1/rerank}
CONC=${2:-8}
SECS=${3:-10}
ROUNDS=${4:-3}
WORKLOAD=${WORKLOAD:-configs/workloads/fixed.yaml}
OUT=${OUT:-.cache/crosscheck}
BENCH=${BENCH:-bin/bench}
PAUSE=${PAUSE:-5}   # seconds between runs for leftovers to drain
command -v wrk >/dev/null || { echo "wrk not installed (apt-get install wrk)"; exit 2; }
mkdir -p "$OUT"

"$BENCH" load --target "$TARGET" --workload "$WORKLOAD" --write-body "$OUT/body.json"
cat > "$OUT/post.lua" <<LUA
local f = assert(io.open("$OUT/body.json", "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
-- Count non-200 replies as errors so a failing target cannot pass the check.
function response(status, headers, body)
  if status ~= 200 then wrk.thread:set("bad", (wrk.thread:get("bad") or 0) + 1) end
end
LUA
THREADS=$(( CONC < 2 ? CONC : 2 ))

# wrk prints latency as 1.23ms / 456.78us / 1.02s: convert to ms.
to_ms() { awk '{v=$1; if (v ~ /us$/) {sub(/us$/,"",v); print v/1000} else if (v ~ /ms$/) {sub(/ms$/,"",v); print v} else if (v ~ /m$/) {sub(/m$/,"",v); print v*60000} else {sub(/s$/,"",v); print v*1000}}'; }
median() { sort -g | awk '{a[NR]=$1} END {if (NR%2) print a[(NR+1)/2]; else print (a[NR/2]+a[NR/2+1])/2}'; }

echo "load: $(uptime)"
: > "$OUT/wrk.tsv"; : > "$OUT/bench.tsv"
for r in $(seq 1 "$ROUNDS"); do
  wrk -t"$THREADS" -c"$CONC" -d"${SECS}s" --latency -s "$OUT/post.lua" "$TARGET" > "$OUT/wrk-$r.txt"
  rps=$(awk '/^Requests\/sec:/ {print $2}' "$OUT/wrk-$r.txt")
  p50=$(awk '$1=="50%" {print $2}' "$OUT/wrk-$r.txt" | to_ms)
  non2xx=$(awk '/Non-2xx/ {print $NF}' "$OUT/wrk-$r.txt"); non2xx=${non2xx:-0}
  echo -e "$rps\t$p50\t$non2xx" >> "$OUT/wrk.tsv"
  # wrk drops its connections at the end with requests still in flight; a proxy keeps working
  # on them, so let the cluster drain before the next tool starts (else it starts handicapped).
  sleep "$PAUSE"
  "$BENCH" load --target "$TARGET" --workload "$WORKLOAD" --concurrency "$CONC" --duration "${SECS}s" \
    --nodes-url none --json > "$OUT/bench-$r.json"
  python3 - "$OUT/bench-$r.json" >> "$OUT/bench.tsv" <<'PY'
import json, sys
r = json.load(open(sys.argv[1]))
print(f"{r['throughput_rps']}\t{r['p50_ms']}\t{r['errors']}")
PY
  sleep "$PAUSE"
  echo "round $r: wrk $(tail -1 "$OUT/wrk.tsv" | awk '{printf "%.1f req/s p50 %.2f ms non2xx %d", $1, $2, $3}')  |  bench $(tail -1 "$OUT/bench.tsv" | awk '{printf "%.1f req/s p50 %.2f ms errors %d", $1, $2, $3}')"
done
echo "load: $(uptime)"

w_rps=$(cut -f1 "$OUT/wrk.tsv" | median); w_p50=$(cut -f2 "$OUT/wrk.tsv" | median)
b_rps=$(cut -f1 "$OUT/bench.tsv" | median); b_p50=$(cut -f2 "$OUT/bench.tsv" | median)
w_err=$(cut -f3 "$OUT/wrk.tsv" | paste -sd+ | bc); b_err=$(cut -f3 "$OUT/bench.tsv" | paste -sd+ | bc)
awk -v wr="$w_rps" -v wp="$w_p50" -v br="$b_rps" -v bp="$b_p50" -v we="$w_err" -v be="$b_err" -v c="$CONC" -v s="$SECS" -v n="$ROUNDS" 'BEGIN {
  dr = (br - wr) / wr * 100; dp = (bp - wp) / wp * 100
  printf "median of %d rounds, concurrency %d, %ds each:\n", n, c, s
  printf "  throughput  wrk %.2f req/s   bench %.2f req/s   diff %+.1f%%\n", wr, br, dr
  printf "  p50         wrk %.2f ms      bench %.2f ms      diff %+.1f%%\n", wp, bp, dp
  printf "  errors      wrk %d non-2xx   bench %d\n", we, be
  ok = (dr < 10 && dr > -10 && dp < 10 && dp > -10 && we == 0 && be == 0)
  print (ok ? "AGREE within 10%" : "DISAGREE (or errors)")
  exit (ok ? 0 : 1)
}'
