"""Where TALON auto's expected tokens run ahead of the realised ones (docs/benchmarks.md, run 27): each
headline prompt decoded with TALON auto at the CPU defaults on the cached curve, and per category and
depth the calibrated acceptances (given the parent, as the run's online calibration had them) of the
reached nodes against their verdicts; the same by sibling rank; E / realised by the run's first and
second half of steps, per category and pooled.  From the repository root:

    PYTHONPATH=. python docs/bench/headline-cpu-epyc-r27/depth_calibration.py [CATEGORIES] [METHOD]"""

import sys
from collections import defaultdict

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig, device_default_tree
from talon.drafters.calibration import Calibration, reached_nodes
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry

registry = ModelRegistry()
target = registry.get("embedded")
runner = MethodRunner(target, registry, "head")
exp = SUITES["headline"].experiments[0]
items, _ = load_prompts(exp)
cats = sys.argv[1].split(",") if len(sys.argv) > 1 else None
items = [i for i in items if cats is None or i["category"] in cats]
default = device_default_tree(False)[0]
method = sys.argv[2] if len(sys.argv) > 2 else "talon+auto"
cfg = tree_config(method, {k: getattr(default, k) for k in ("topk", "mu", "depth", "gamma")})
curve = runner.curve(method, cfg)
drafter = runner.drafter(method)
prior = drafter.calibration_prior
agg = defaultdict(lambda: [0, 0.0, 0.0])  # depth -> reached, sum given, accepted
halves = defaultdict(lambda: [0.0, 0.0])
rank = defaultdict(lambda: [0, 0.0, 0.0])
for item in items:
    ids = encode_prompt(target, item["prompt"])
    trace, _ = timed_generation(target, drafter, cfg, DecodeConfig(max_new_tokens=64), ids, curve)
    cal = Calibration(prior)
    n = len(trace.steps)
    for i, step in enumerate(trace.steps):
        given = cal.given_parents(step.tree)
        for node, accepted in reached_nodes(step.tree, step):
            d = min(step.tree.depth[node], 4)
            a = agg[(item["category"], d)]
            a[0] += 1
            a[1] += given[node]
            a[2] += accepted
            sib = step.tree.children(step.tree.parent[node]).index(node)
            r = rank[(min(sib, 2), d if d < 2 else 2)]
            r[0] += 1
            r[1] += given[node]
            r[2] += accepted
        h = halves[(item["category"], i >= n // 2)]
        h[0] += step.expected or 0.0
        h[1] += len(step.accepted_path)
        cal.observe(step.tree, step)
print("category depth reached given accepted ratio")
for (c, d), (r, g, a) in sorted(agg.items()):
    print(f"{c:14s} {d} {r:5d} {g:7.1f} {a:6.0f} {g / a if a else float('nan'):5.2f}")
tot = defaultdict(lambda: [0, 0.0, 0.0])
for (_c, d), v in agg.items():
    for j in range(3):
        tot[d][j] += v[j]
for d, (r, g, a) in sorted(tot.items()):
    print(f"ALL depth {d}: reached {r} given {g:.1f} accepted {a} ratio {g / a:.3f}")
for (s, d), (r, g, a) in sorted(rank.items()):
    print(f"sibling rank {s} depth {d}: reached {r} given {g:.1f} accepted {a} ratio {g / max(a, 1):.3f}")
for (c, second), (e, p) in sorted(halves.items()):
    print(f"{c:14s} {'2nd' if second else '1st'} half E/R {e / p - 1:+.3f}")
E = sum(v[0] for v in halves.values())
R = sum(v[1] for v in halves.values())
print(f"POOLED E/R {E / R - 1:+.4f}  (E {E:.1f}, R {R:.0f})")
bycat = defaultdict(lambda: [0.0, 0.0])
for (c, _), (e, p) in halves.items():
    bycat[c][0] += e
    bycat[c][1] += p
print("  ".join(f"{c} {e / p - 1:+.3f}" for c, (e, p) in sorted(bycat.items())))
