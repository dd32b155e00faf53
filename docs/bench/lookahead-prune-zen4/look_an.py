import json, sys, math, statistics as st
from collections import defaultdict

rows = [json.loads(l) for l in open(sys.argv[1])]
ref = sys.argv[2] if len(sys.argv) > 2 else "auto"
by = defaultdict(dict)
for r in rows:
    by[(r["rep"], r["id"])][r["variant"]] = r
variants = sorted({r["variant"] for r in rows})
for v in variants:
    rs = [r for r in rows if r["variant"] == v]
    sp = sum(r["ar_seconds"] for r in rs) / sum(r["seconds"] for r in rs)
    logs = [math.log(k[ref]["seconds"] / k[v]["seconds"]) for k in by.values() if v in k and ref in k]
    gm = math.exp(st.mean(logs))
    se = st.stdev(logs) / math.sqrt(len(logs)) if len(logs) > 1 else 0
    E = sum(r["E"] * r["steps_n"] for r in rs if r["E"])
    R = sum(r["R"] * r["steps_n"] for r in rs if r["R"])
    print(
        f"{v:8s} n={len(rs):3d} x ar {sp:.3f}  vs {ref} gm {gm:.3f} ±{se:.3f}  equal {sum(r['equal'] for r in rs)}/{len(rs)}  nodes {st.mean(r['nodes'] for r in rs):.2f} depth {st.mean(r['depth'] for r in rs):.2f} plain {st.mean((r['plain'] or 0) for r in rs):.1%}  E/R {E / R - 1 if R else 0:+.1%}"
    )
cats = sorted({r["category"] for r in rows})
print("x ar by category; nodes (x chat)")
chat = {
    v: st.mean(r["nodes"] for r in rows if r["variant"] == v and r["category"] == "chat") for v in variants if v != "ar"
}
for c in cats:
    line = f"{c:14s}"
    for v in variants:
        if v == "ar":
            continue
        rs = [r for r in rows if r["variant"] == v and r["category"] == c]
        sp = sum(r["ar_seconds"] for r in rs) / sum(r["seconds"] for r in rs)
        nodes = st.mean(r["nodes"] for r in rs)
        line += f"  {v} {sp:.2f} {nodes:.1f} ({nodes / chat[v]:.2f})"
    print(line)
