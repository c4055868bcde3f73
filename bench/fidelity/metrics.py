#!/usr/bin/env python3
"""Run `bench compare` and record the proxy's and the nodes' metrics of every run (config × load).

bench compare reports latency and goodput only. To see *why* one configuration beats another this
wraps it: while it runs, the proxy and node processes it starts (its children) are scraped every
0.25 s on their /metrics, and at each run's result line the counters are differenced against the
previous run's end, so every row gets its own figures:

  batches/req   Δsum/Δcount of relevance_proxy_batches_per_request
  imbalance     mean planned max/mean completion of a request's batches (proxy)
  node batches  ScoreBatch calls the nodes answered, per node (how the route spread them)
  passes        forward passes; merged = batches per pass (node-side merging of queued batches)
  prefix share  computed prefix tokens ÷ (prefix + item tokens): work spent re-reading queries
  node ms/batch Σ forward seconds ÷ batches answered (what a batch costs the nodes)
  busy          Σ forward seconds ÷ run length, per node (utilisation)

Usage (the rest of the arguments go to bench compare; --out is required):
  BENCH=/tmp/h2bin/bench bench/fidelity/metrics.py --out DIR --nodes 2 ...
Writes DIR/metrics.json and DIR/metrics.md beside compare's own results.
"""
import json
import os
import re
import subprocess
import sys
import threading
import time
import urllib.request

POLL = 0.25
ROW = re.compile(r"compare: \[\s*(\d+)/(\d+)\] (\S+)\s+load\s+(\d+)%")


def children(pid):
    out = subprocess.run(["ps", "-o", "pid=,args=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    procs = []
    for line in out.splitlines():
        p, _, args = line.strip().partition(" ")
        m = re.search(r"--http-addr (\S+)", args)
        if m:
            kind = "proxy" if "proxy serve" in args else "node"
            procs.append((int(p), kind, m.group(1)))
    return procs


def parse(text):
    vals = {}
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith("relevance_"):
            continue
        name, _, v = line.rpartition(" ")
        try:
            vals[name] = float(v)
        except ValueError:
            pass
    return vals


def scrape(addr):
    try:
        with urllib.request.urlopen(f"http://{addr}/metrics", timeout=1) as r:
            return parse(r.read().decode())
    except Exception:
        return None


class Poller(threading.Thread):
    """Keeps the latest snapshot of every child process: {pid: (kind, addr, metrics)}."""

    def __init__(self, parent):
        super().__init__(daemon=True)
        self.parent, self.lock, self.latest, self.stop = parent, threading.Lock(), {}, False

    def run(self):
        while not self.stop:
            for pid, kind, addr in children(self.parent):
                m = scrape(addr)
                if m is not None:
                    with self.lock:
                        self.latest[pid] = (kind, addr, m)
            time.sleep(POLL)

    def snapshot(self):
        with self.lock:
            return dict(self.latest)


def delta(now, before, key):
    return now.get(key, 0.0) - (before or {}).get(key, 0.0)


def row_metrics(snap, base, seconds):
    proxy = [(pid, m) for pid, (k, _, m) in snap.items() if k == "proxy"]
    nodes = sorted([(addr, pid, m) for pid, (k, addr, m) in snap.items() if k == "node"])
    out = {}
    if proxy:
        pid, m = max(proxy)  # the newest proxy is the one serving this run
        b = base.get(pid, (None, None, {}))[2]
        cnt = delta(m, b, "relevance_proxy_batches_per_request_count")
        out["requests_planned"] = cnt
        if cnt > 0:
            out["batches_per_request"] = delta(m, b, "relevance_proxy_batches_per_request_sum") / cnt
            out["imbalance_mean"] = delta(m, b, "relevance_proxy_split_imbalance_ratio_sum") / max(1, delta(m, b, "relevance_proxy_split_imbalance_ratio_count"))
        bd = delta(m, b, "relevance_proxy_batch_duration_seconds_count")
        if bd > 0:
            out["proxy_batch_ms_mean"] = 1000 * delta(m, b, "relevance_proxy_batch_duration_seconds_sum") / bd
        er = delta(m, b, "relevance_proxy_cost_estimate_ratio_count")
        if er > 0:
            out["measured_over_predicted_mean"] = delta(m, b, "relevance_proxy_cost_estimate_ratio_sum") / er
        for reason in ("overload", "deadline"):
            out[f"rejected_{reason}"] = delta(m, b, f'relevance_proxy_rejected_total{{reason="{reason}"}}')
        if "relevance_proxy_admission_margin" in m:
            out["admission_margin_end"] = m["relevance_proxy_admission_margin"]
        # Admission's error at the request level: quantiles of time ÷ projected finish, from the
        # histogram's cumulative buckets (the upper edge of the bucket the quantile falls in).
        pre = 'relevance_proxy_request_projection_ratio_bucket{le="'
        buckets = sorted((float(k[len(pre):-2]), delta(m, b, k)) for k in m if k.startswith(pre))
        total = buckets[-1][1] if buckets else 0
        out["request_ratio_n"] = total
        for q in (0.5, 0.9, 0.99):
            if total > 0:
                out[f"request_ratio_q{int(q * 100)}"] = next(le for le, c in buckets if c >= q * total)
        out["rescues"] = delta(m, b, "relevance_proxy_rescues_total")
        out["retries"] = delta(m, b, "relevance_proxy_retries_total")
        out["hedges"] = delta(m, b, "relevance_proxy_hedges_total")
    per = []
    for addr, pid, m in nodes:
        b = base.get(pid, (None, None, {}))[2]
        passes = delta(m, b, "relevance_scorer_forward_merged_batches_count")
        batches = delta(m, b, "relevance_scorer_forward_merged_batches_sum")
        pre = delta(m, b, 'relevance_scorer_tokens_total{kind="prefix"}')
        item = delta(m, b, 'relevance_scorer_tokens_total{kind="item"}')
        reused = delta(m, b, 'relevance_scorer_tokens_total{kind="reused"}')
        fwd = delta(m, b, "relevance_scorer_forward_duration_seconds_sum")
        qw = delta(m, b, "relevance_scorer_queue_wait_seconds_sum")
        qn = delta(m, b, "relevance_scorer_queue_wait_seconds_count")
        per.append({"node": addr, "batches": batches, "passes": passes, "prefix_tokens": pre, "item_tokens": item,
                    "reused_tokens": reused, "forward_s": fwd, "busy": fwd / seconds if seconds else None,
                    "queue_wait_ms_mean": 1000 * qw / qn if qn else None})
    out["nodes"] = per
    tb = sum(p["batches"] for p in per)
    tp = sum(p["passes"] for p in per)
    pre = sum(p["prefix_tokens"] for p in per)
    item = sum(p["item_tokens"] for p in per)
    if tp:
        out["batches_per_pass"] = tb / tp
    if pre + item:
        out["prefix_share"] = pre / (pre + item)
    if tb:
        # Per batch answered, not per request planned: a refused request is planned too.
        out["node_ms_per_batch"] = 1000 * sum(p["forward_s"] for p in per) / tb
    out["busy"] = [p["busy"] for p in per]
    return out


def main():
    args = sys.argv[1:]
    if "--out" not in args:
        sys.exit("metrics.py: --out DIR is required")
    outdir = args[args.index("--out") + 1]
    dur = 10.0
    if "--duration" in args:
        d = args[args.index("--duration") + 1]
        dur = float(d[:-1]) * (60 if d.endswith("m") else 1) if d[-1] in "sm" else float(d)
    bench = os.environ.get("BENCH", "bin/bench")
    proc = subprocess.Popen([bench, "compare", *args], stderr=subprocess.PIPE, text=True)
    poller = Poller(proc.pid)
    poller.start()
    rows, base = [], {}
    for line in proc.stderr:
        sys.stderr.write(line)
        sys.stderr.flush()
        m = ROW.search(line)
        if not m:
            continue
        snap = poller.snapshot()
        r = {"config": m.group(3), "load": int(m.group(4)) / 100, **row_metrics(snap, base, dur)}
        rows.append(r)
        print(f"  metrics: batches/req {r.get('batches_per_request', float('nan')):.2f}  "
              f"batches/pass {r.get('batches_per_pass', float('nan')):.2f}  prefix share {r.get('prefix_share', float('nan')):.2f}  "
              f"node ms/batch {r.get('node_ms_per_batch', float('nan')):.1f}  busy {['%.2f' % b for b in r['busy'] if b is not None]}",
              file=sys.stderr)
        base = snap
    poller.stop = True
    rc = proc.wait()
    os.makedirs(outdir, exist_ok=True)
    with open(os.path.join(outdir, "metrics.json"), "w") as f:
        json.dump(rows, f, indent=1)
    with open(os.path.join(outdir, "metrics.md"), "w") as f:
        f.write("| config | load | batches/req | imbalance | batches/pass | prefix share | node ms/batch | busy per node |\n|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            busy = " / ".join("%.2f" % b for b in r["busy"] if b is not None)
            f.write(f"| {r['config']} | {100 * r['load']:.0f} % | {r.get('batches_per_request', 0):.2f} | {r.get('imbalance_mean', 0):.3f} | "
                    f"{r.get('batches_per_pass', 0):.2f} | {r.get('prefix_share', 0):.2f} | {r.get('node_ms_per_batch', 0):.1f} | {busy} |\n")
    sys.exit(rc)


if __name__ == "__main__":
    main()
