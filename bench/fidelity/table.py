#!/usr/bin/env python3
"""Merge the cells of bench/fidelity/grid.sh (OUT/<config>-<load>/{results,metrics}.json) into
one markdown table: latency and goodput from bench compare, batches and node work from metrics.py."""
import glob
import json
import os
import sys


def node_ms_per_batch(m):
    # Per batch the nodes answered, not per request planned: refused requests are planned too.
    nodes = m.get("nodes", [])
    b = sum(n["batches"] for n in nodes)
    return 1000 * sum(n["forward_s"] for n in nodes) / b if b else 0.0


def errs(r):
    by = r.get("errors_by_kind") or {}
    kinds = ", ".join(f"{k.removeprefix('http_')}: {v}" for k, v in sorted(by.items()))
    return f"{r['errors']} ({kinds})" if kinds else str(r["errors"])


def main(out):
    rows, slo = [], set()
    for d in sorted(glob.glob(os.path.join(out, "*"))):
        rj, mj = os.path.join(d, "results.json"), os.path.join(d, "metrics.json")
        if not (os.path.exists(rj) and os.path.exists(mj)):
            continue
        res, met = json.load(open(rj)), json.load(open(mj))
        slo.add(res.get("slo_ms", 500))
        for r in res["rows"]:
            m = next((x for x in met if x["config"] == r["config"] and abs(x["load"] - r["load"]) < 1e-9), {})
            rows.append((r, m))
    rows.sort(key=lambda x: (x[0]["load"], x[0]["config"]))
    slo_ms = "/".join("%g" % v for v in sorted(slo)) or "500"
    print(f"| config | load | n | p50 ms | p99 ms | goodput ≤ {slo_ms} ms | errors | batches/req | batches/pass | prefix share | node ms/batch | busy per node |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for r, m in rows:
        busy = " / ".join("%.2f" % b for b in m.get("busy", []) if b is not None)
        print(f"| {r['config']} | {100 * r['load']:.0f} % | {r['requests']} | {r['p50_ms']:.1f} | {r['p99_ms']:.1f} | "
              f"{100 * r['goodput_ratio']:.1f} % | {errs(r)} | {m.get('batches_per_request', 0):.2f} | "
              f"{m.get('batches_per_pass', 0):.2f} | {m.get('prefix_share', 0):.3f} | {node_ms_per_batch(m):.1f} | {busy} |")


if __name__ == "__main__":
    main(sys.argv[1])
