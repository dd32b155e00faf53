"""Summarise attention_ab.py's JSON: per round, each variant's total seconds and tokens per second, the
C++ attention's speed against SDPA's (total time, and per prompt run: geometric mean, range, faster in
how many), and whether every run's tokens agree.

    python docs/bench/xeon-emr-r59/attention_ab_summary.py docs/bench/xeon-emr-r59/attention_ab.json
"""

import json
import math
import sys

rows = json.load(open(sys.argv[1]))
rounds = sorted({r["round"] for r in rows})
for rnd in rounds + ["all"]:
    sel = [r for r in rows if rnd == "all" or r["round"] == rnd]
    total = {k: sum(r["runs"][k]["seconds"] for r in sel) for k in sel[0]["runs"]}
    tokens = {k: sum(len(r["runs"][k]["ids"]) for r in sel) for k in sel[0]["runs"]}
    print(f"round {rnd}: {len(sel)} prompt runs")
    for k in sorted(total):
        speed = tokens[k] / total[k]
        print(f"  {k:12s} {total[k]:7.1f} s  {speed:5.1f} tokens/s  × ar/sdpa {total['ar/sdpa'] / total[k]:.3f}")
    for m in ("ar", "talon"):
        ratios = [r["runs"][f"{m}/sdpa"]["seconds"] / r["runs"][f"{m}/rows"]["seconds"] for r in sel]
        geo = math.exp(sum(map(math.log, ratios)) / len(ratios))
        faster = sum(x > 1 for x in ratios)
        print(
            f"  {m}: C++ rows {total[f'{m}/sdpa'] / total[f'{m}/rows']:.3f}x SDPA in total time; per prompt run "
            f"{geo:.3f}x geometric mean ({min(ratios):.2f}-{max(ratios):.2f}), faster in {faster} of {len(ratios)}"
        )
lossless = sum(r["runs"][f"talon/{m}"]["ids"] == r["runs"][f"ar/{m}"]["ids"] for r in rows for m in ("sdpa", "rows"))
same = sum(r["runs"]["ar/sdpa"]["ids"] == r["runs"]["ar/rows"]["ids"] for r in rows)
print(f"TALON auto equal to ar under the same attention: {lossless} of {2 * len(rows)}")
print(f"ar under the C++ attention equal to ar under SDPA: {same} of {len(rows)}")
nodes = {m: [n for r in rows for n in r["runs"][f"talon/{m}"]["nodes"]] for m in ("sdpa", "rows")}
print("TALON auto draft nodes a step: " + ", ".join(f"{m} {sum(v) / len(v):.2f}" for m, v in nodes.items()))
