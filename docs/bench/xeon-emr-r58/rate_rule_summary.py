"""Summarise ``rate_rule_ab.py``'s runs: speed over ``ar`` (total seconds), per variant and round, and per
category the draft nodes a step, the share of plain steps, and E / realised - 1.

    python docs/bench/xeon-emr-r58/rate_rule_summary.py OUT.json
"""

from __future__ import annotations

import json
import statistics
import sys
from collections import defaultdict


def main(path: str) -> None:
    rows = json.load(open(path))
    variants = [v for v in rows[0]["runs"] if v != "ar"]
    same = sum(r["runs"][v]["ids"] == r["runs"]["ar"]["ids"] for r in rows for v in variants)
    print(f"{len(rows)} prompt runs; greedy tokens equal to ar in {same} of {len(rows) * len(variants)}")
    for rnd in sorted({r["round"] for r in rows}):
        sel = [r for r in rows if r["round"] == rnd]
        ar = sum(r["runs"]["ar"]["seconds"] for r in sel)
        speeds = (f"{v} {ar / sum(r['runs'][v]['seconds'] for r in sel):.3f}x ar" for v in variants)
        print(f"round {rnd}: " + ", ".join(speeds))
    for a, b in zip(variants[::2], variants[1::2]):
        per = [r["runs"][a]["seconds"] / r["runs"][b]["seconds"] for r in rows]
        gm = statistics.geometric_mean(per)
        tot = sum(r["runs"][a]["seconds"] for r in rows) / sum(r["runs"][b]["seconds"] for r in rows)
        print(
            f"{b} against {a}: {tot:.3f}x in total time, per prompt-run geometric mean {gm:.3f}x "
            f"(range {min(per):.2f}-{max(per):.2f}), faster in {sum(p > 1 for p in per)} of {len(per)}"
        )
    cats = defaultdict(list)
    for r in rows:
        cats[r["category"]].append(r)
    print("category | " + " | ".join(f"{v}: nodes/step, plain %, E/real-1" for v in variants))
    for cat, sel in list(cats.items()) + [("all", rows)]:
        cells = []
        for v in variants:
            nodes = [n for r in sel for n in r["runs"][v]["nodes"]]
            e = sum(x for r in sel for x in r["runs"][v]["expected"])
            c = sum(x for r in sel for x in r["runs"][v]["committed"])
            cells.append(
                f"{statistics.mean(nodes):.2f}, {100 * sum(n == 0 for n in nodes) / len(nodes):.0f} %, "
                f"{100 * (e / c - 1):+.1f} %"
            )
        print(f"{cat} | " + " | ".join(cells))


if __name__ == "__main__":
    main(sys.argv[1])
