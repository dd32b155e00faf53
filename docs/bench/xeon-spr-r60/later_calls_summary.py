"""Summary of ``later_calls_ab.py``'s JSON: total time of each pricing against ``ar`` and against each
other, per-prompt geometric mean, and per category draft nodes a step (and × chat's), tree depth, plain
steps, and planned over realised committed tokens.

    python docs/bench/xeon-spr-r60/later_calls_summary.py OUT.json
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from collections import defaultdict

data = json.load(open(sys.argv[1]))
results = data["results"]
names = [n for n in results[0]["runs"] if n != "ar"]
total = {n: sum(r["runs"][n]["seconds"] for r in results) for n in ["ar", *names]}
lossless = sum(r["runs"][n]["ids"] == r["runs"]["ar"]["ids"] for r in results for n in names)
print(f"{len(results)} prompt runs; every pricing's tokens equal ar's in {lossless} of {len(results) * len(names)}")
for n in names:
    print(f"{n:8s} x ar (total time): {total['ar'] / total[n]:.3f}")
a, b = names
ratios = [r["runs"][b]["seconds"] / r["runs"][a]["seconds"] for r in results]
gm = math.exp(statistics.fmean(math.log(x) for x in ratios))
print(
    f"{a} x {b}, total time {total[b] / total[a]:.3f}; per prompt run {gm:.3f} geometric mean "
    f"({min(ratios):.2f}-{max(ratios):.2f}), faster in {sum(x > 1 for x in ratios)} of {len(ratios)}"
)
for rnd in sorted({r["round"] for r in results}):
    rows = [r for r in results if r["round"] == rnd]
    t = {n: sum(r["runs"][n]["seconds"] for r in rows) for n in ["ar", *names]}
    print(f"round {rnd}: " + ", ".join(f"{n} {t['ar'] / t[n]:.3f}x ar" for n in names))
for n in names:
    cat = defaultdict(lambda: {"nodes": [], "depth": [], "expected": 0.0, "committed": 0, "speed": [0.0, 0.0]})
    for r in results:
        run = r["runs"][n]
        c = cat[r["category"]]
        c["nodes"] += run["nodes"]
        c["depth"] += run["depth"]
        c["expected"] += sum(e for e in run["expected"] if e is not None)
        c["committed"] += sum(k for k, e in zip(run["committed"], run["expected"]) if e is not None)
        c["speed"][0] += r["runs"]["ar"]["seconds"]
        c["speed"][1] += run["seconds"]
    chat = statistics.fmean(cat["chat"]["nodes"])
    chat_depth = statistics.fmean(cat["chat"]["depth"])
    print(f"\n{n}: category, x ar, draft nodes a step (x chat's), depth (x chat's), plain steps, E / realised - 1")
    for name, c in cat.items():
        nodes, depth = statistics.fmean(c["nodes"]), statistics.fmean(c["depth"])
        plain = sum(x == 0 for x in c["nodes"]) / len(c["nodes"])
        print(
            f"  {name:14s} {c['speed'][0] / c['speed'][1]:.2f}  {nodes:5.2f} ({nodes / chat:.2f})  "
            f"{depth:4.2f} ({depth / chat_depth:.2f})  {plain:4.0%}  {c['expected'] / c['committed'] - 1:+.1%}"
        )
