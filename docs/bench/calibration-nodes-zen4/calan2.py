import json, sys
from collections import defaultdict

for f in sys.argv[1:]:
    rows = [json.loads(l) for l in open(f)]
    nodes = [r for r in rows if not r.get("step")]
    print("==", f)
    h = defaultdict(lambda: [0, 0, 0])
    for n in nodes:
        for k in ((n["cat"], min(n["d"], 3)), ("all", min(n["d"], 3))):
            h[k][0] += n["c"]
            h[k][1] += n["ok"]
            h[k][2] += 1
    cats = sorted({k[0] for k in h})
    for c in cats:
        print(
            f"{c:14s}",
            "  ".join(
                f"d{d}: {h[(c, d)][0]:.0f}/{h[(c, d)][1]} {h[(c, d)][0] / max(h[(c, d)][1], 1) - 1:+.0%}"
                for d in (1, 2, 3)
            ),
        )
