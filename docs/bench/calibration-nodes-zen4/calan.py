import json, sys
from collections import defaultdict

for f in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f)]
    steps = [r for r in rows if r.get("step")]
    nodes = [r for r in rows if not r.get("step")]
    print("==", f)
    g = defaultdict(lambda: [0, 0, 0])
    for s in steps:
        for k in (s["cat"], "all"):
            g[k][0] += s["E"]
            g[k][1] += s["got"]
            g[k][2] += 1
    print("steps E/got:", ", ".join(f"{k} {v[0] / v[1] - 1:+.0%} ({v[2]})" for k, v in g.items()))

    def tab(name, key):
        h = defaultdict(lambda: [0, 0, 0])
        for n in nodes:
            k = key(n)
            if k is None:
                continue
            h[k][0] += n["c"]
            h[k][1] += n["ok"]
            h[k][2] += 1
        print(
            name + ":",
            ", ".join(f"{k}: {v[0]:.0f}/{v[1]} {v[0] / max(v[1], 1) - 1:+.0%} n={v[2]}" for k, v in sorted(h.items())),
        )

    tab("depth", lambda n: min(n["d"], 4))
    tab("rank d1", lambda n: min(n["rank"], 3) if n["d"] == 1 else None)
    tab("rank d2+", lambda n: min(n["rank"], 3) if n["d"] > 1 else None)
    tab(
        "pq d2+",
        lambda n: (0 if n["pq"] < 0.3 else 1 if n["pq"] < 0.6 else 2 if n["pq"] < 0.9 else 3) if n["d"] > 1 else None,
    )
    tab("q", lambda n: 0 if n["q"] < 0.1 else 1 if n["q"] < 0.3 else 2 if n["q"] < 0.6 else 3 if n["q"] < 0.9 else 4)
    tab("nsib d1", lambda n: min(n["nsib"], 6) if n["d"] == 1 else None)
