import json, collections, math, statistics

rows = [json.loads(l) for l in open("docs/bench/auto-vs-fixed-cpu-epyc-zen4/call_price_ab.jsonl")]
key = lambda r: (r["method"], r["delta"], r["n"])
tot = collections.defaultdict(float)
ar = collections.defaultdict(float)
per = collections.defaultdict(list)
bycat = collections.defaultdict(lambda: collections.defaultdict(lambda: [0.0, 0.0]))
eq = collections.Counter()
n = collections.Counter()
nodes = collections.defaultdict(list)
plain = collections.defaultdict(list)
ER = collections.defaultdict(lambda: [0, 0])
ref = {}
for r in rows:
    if r["method"] == "talon" and r["n"] == 4:
        ref[(r["rep"], r["id"])] = r["seconds"]
for r in rows:
    k = key(r)
    tot[k] += r["seconds"]
    ar[k] += r["ar_seconds"]
    eq[k] += r["equal"]
    n[k] += 1
    if r["method"] != "ar":
        per[k].append(math.log(ref[(r["rep"], r["id"])] / r["seconds"]))
        nodes[k].append(r["nodes"])
        plain[k].append(r["plain"] or 0)
    c = bycat[k][r["category"]]
    c[0] += r["ar_seconds"]
    c[1] += r["seconds"]
    if r["E"]:
        ER[k][0] += r["E"] * r["steps_n"]
        ER[k][1] += r["R"] * r["steps_n"]
for k in tot:
    if k[0] == "ar":
        continue
    g = per[k]
    m = statistics.mean(g)
    se = statistics.stdev(g) / math.sqrt(len(g))
    print(
        k,
        f"x ar {ar[k] / tot[k]:.3f}  vs N=4 per-prompt gm {math.exp(m):.3f} ± {se:.3f}  equal {eq[k]}/{n[k]}  nodes {statistics.mean(nodes[k]):.2f} plain {statistics.mean(plain[k]):.1%}",
        f"E/R {ER[k][0] / ER[k][1] - 1:+.1%}" if ER[k][1] else "",
    )
cats = sorted({r["category"] for r in rows})
print("category," + ",".join(f"{k[0]}:{k[1]}:{k[2]}" for k in tot if k[0] != "ar"))
for c in cats:
    print(c, " ".join(f"{bycat[k][c][0] / bycat[k][c][1]:.2f}" for k in tot if k[0] != "ar"))
