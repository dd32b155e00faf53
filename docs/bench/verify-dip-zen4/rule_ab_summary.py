import json, collections, math, statistics, sys

path = sys.argv[1] if len(sys.argv) > 1 else "/tmp/scratch/ab_dip.jsonl"
rows = [json.loads(l) for l in open(path)]
ref = {(r["rep"], r["id"]): r["seconds"] for r in rows if r["variant"] == "N4"}
V = list(dict.fromkeys(r["variant"] for r in rows))
for v in V:
    rs = [r for r in rows if r["variant"] == v and (r["rep"], r["id"]) in ref]
    if not rs:
        continue
    g = [math.log(ref[(r["rep"], r["id"])] / r["seconds"]) for r in rs]
    se = statistics.stdev(g) / math.sqrt(len(g)) if len(g) > 1 else 0
    E = sum((r["E"] or 0) * r["steps_n"] for r in rs)
    R = sum((r["R"] or 0) * r["steps_n"] for r in rs)
    print(
        f"{v:16s} n={len(rs):3d} x ar {sum(r['ar_seconds'] for r in rs) / sum(r['seconds'] for r in rs):.3f}  vs N4 gm {math.exp(statistics.mean(g)):.3f} ±{se:.3f}  equal {sum(r['equal'] for r in rs)}/{len(rs)}  nodes {statistics.mean(r['nodes'] for r in rs):.2f}  plain {statistics.mean((r['plain'] or 0) for r in rs):.1%}"
        + (f"  E/R {E / R - 1:+.1%}" if R else "")
    )
cats = sorted({r["category"] for r in rows})
print("category", " ".join(f"{v:>10s}" for v in V[1:]))
for c in cats:
    line = []
    for v in V[1:]:
        rs = [r for r in rows if r["variant"] == v and r["category"] == c]
        line.append(f"{sum(r['ar_seconds'] for r in rs) / sum(r['seconds'] for r in rs):10.2f}" if rs else " " * 10)
    print(f"{c:13s}", " ".join(line))
