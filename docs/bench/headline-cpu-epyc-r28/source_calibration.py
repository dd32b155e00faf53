"""Where hybrid auto's expected tokens fall short of the realised ones (docs/benchmarks.md, run 28): each
headline prompt of CATEGORIES decoded with hybrid auto at the CPU defaults on the cached curve; per
source, depth and matched n-gram length, the calibrated acceptances (given the parent, as the run's
online calibration had them) of the reached nodes against their verdicts.  From the repository root:

    PYTHONPATH=. python docs/bench/headline-cpu-epyc-r28/source_calibration.py [CATEGORIES]"""

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
items, _ = load_prompts(SUITES["headline"].experiments[0])
cats = sys.argv[1].split(",") if len(sys.argv) > 1 else ["summarisation", "extraction", "qa"]
items = [i for i in items if i["category"] in cats]
default = device_default_tree(False)[0]
method = "hybrid+auto"
cfg = tree_config(method, {k: getattr(default, k) for k in ("topk", "mu", "depth", "gamma")})
curve = runner.curve(method, cfg)
drafter = runner.drafter(method)
agg = defaultdict(lambda: [0, 0.0, 0.0])  # (category, source, depth, match) -> reached, sum given, accepted
er = defaultdict(lambda: [0.0, 0.0, 0])  # category -> E, realised, steps
for item in items:
    ids = encode_prompt(target, item["prompt"])
    trace, _ = timed_generation(target, drafter, cfg, DecodeConfig(max_new_tokens=64), ids, curve)
    cal = Calibration(drafter.calibration_prior)
    for step in trace.steps:
        given = cal.given_parents(step.tree)
        for node, accepted in reached_nodes(step.tree, step):
            t = step.tree
            key = (item["category"], t.source[node], min(t.depth[node], 4), min(t.match[node], 3))
            a = agg[key]
            a[0] += 1
            a[1] += given[node]
            a[2] += accepted
        e = er[item["category"]]
        e[0] += step.expected or 0.0
        e[1] += len(step.accepted_path)
        e[2] += 1
        cal.observe(step.tree, step)
print("category source depth match reached given accepted given/accepted")
for key, (r, g, a) in sorted(agg.items()):
    print(*key, r, f"{g:.1f}", int(a), f"{g / a:.2f}" if a else "-")
for c, (e, p, n) in er.items():
    print(f"{c}: E {e:.1f} realised {p:.0f} over {n} steps: E/R {e / p - 1:+.3f}")
