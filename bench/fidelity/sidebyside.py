#!/usr/bin/env python3
"""Fidelity table: the cells of bench/fidelity/headline.sh on real nodes (OUT/real) beside the same
cells on emulated nodes (OUT/emulated), p50, p99 and goodput with the emulator's error.

Usage: bench/fidelity/sidebyside.py OUT
"""
import glob
import json
import os
import sys


def cells(d):
    out = {}
    for f in glob.glob(os.path.join(d, "*", "results.json")):
        res = json.load(open(f))
        for r in res["rows"]:
            out[(r["config"], r["load"])] = (r, res.get("slo_ms", 500))
    return out


def pct(emu, real):
    return f"{100 * (emu / real - 1):+.0f} %" if real else "–"


def main(out):
    real, emu = cells(os.path.join(out, "real")), cells(os.path.join(out, "emulated"))
    keys = sorted(set(real) & set(emu), key=lambda k: (k[1], k[0]))
    if not keys:
        sys.exit("no cell ran on both real and emulated nodes")
    slo = real[keys[0]][1]
    print(f"| config | load | n real / emulated | real p50 / p99 ms | emulated p50 / p99 ms | p50 error | p99 error "
          f"| goodput ≤ {slo:g} ms real → emulated | errors real → emulated |")
    print("|---|---|---|---|---|---|---|---|---|")
    within = {"p50": 0, "p99": 0}
    for k in keys:
        r, e = real[k][0], emu[k][0]
        for q in within:
            if r[f"{q}_ms"] and abs(e[f"{q}_ms"] / r[f"{q}_ms"] - 1) <= 0.15:
                within[q] += 1
        print(f"| {k[0]} | {100 * k[1]:.0f} % | {r['requests']} / {e['requests']} | {r['p50_ms']:.0f} / {r['p99_ms']:.0f} "
              f"| {e['p50_ms']:.0f} / {e['p99_ms']:.0f} | {pct(e['p50_ms'], r['p50_ms'])} | {pct(e['p99_ms'], r['p99_ms'])} "
              f"| {100 * r['goodput_ratio']:.1f} → {100 * e['goodput_ratio']:.1f} % | {r['errors']} → {e['errors']} |")
    print(f"\nwithin 15 %: p50 in {within['p50']} of {len(keys)} cells, p99 in {within['p99']} of {len(keys)}")


if __name__ == "__main__":
    main(sys.argv[1])
