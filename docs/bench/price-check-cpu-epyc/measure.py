"""Does a cost curve price TALON auto's steps at what the loop pays?  Interleaved per prompt: plain
decoding, then TALON auto (the shipped head, K=6, mu=0.1, cap 128) sized by the curve; every step's wall
clock, draft phase and verify phase over the median plain step's, against the curve's price for that
step, by tree size.

    PYTHONPATH=. python docs/bench/price-check-cpu-epyc/measure.py [CURVE.json]

Without an argument it uses this machine's cached curve (measured now if missing)."""

import json
import statistics as st
import sys

import pandas as pd

from talon.bench.prompts import read_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import cost_curve_for
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry
from talon.runtime.cost_curve import CostCurve

registry = ModelRegistry()
target = registry.get("embedded")
drafter = drafter_for("talon", "head", target, registry)
if len(sys.argv) > 1:
    curve = CostCurve.from_dict(json.loads(open(sys.argv[1]).read()))
else:
    curve = cost_curve_for(target, drafter)
cfg, plain = TreeConfig(method="talon", budget=128, topk=6, mu=0.1, auto=True), TreeConfig(method="ar")
dec = DecodeConfig(max_new_tokens=64)
rows = []
for prompt in read_prompts("assets/prompts.jsonl")[:10]:
    ar = run_to_end(target, None, plain, dec, prompt["prompt"], texts=False)
    talon = run_to_end(target, drafter, cfg, dec, prompt["prompt"], texts=False, cost_curve=curve)
    unit = st.median(s.step_seconds for s in ar.steps[1:])
    ar_verify = st.median(s.verify_seconds for s in ar.steps[1:])
    for s in talon.steps[1:]:
        n = len(s.tree)
        rows.append(
            {
                "nodes": n,
                "price": s.price,
                "paid": s.step_seconds / unit,
                "draft paid": s.draft_seconds / unit,
                "draft priced": sum(curve.call_seconds(w) for w in s.call_widths) / curve.plain,
                "verify paid": (s.verify_seconds - ar_verify) / unit,
                "verify priced": (curve.verify_seconds(n) - curve.verify_seconds(1)) / curve.plain,
            }
        )
df = pd.DataFrame(rows)
print(f"curve: {curve.measured} ({curve.note}); {len(df)} TALON auto steps; verify = over one node")
print(df.mean().round(3).to_string())
df["size"] = pd.cut(df.nodes, [0, 2, 4, 8, 16, 200])
print(df.groupby("size", observed=True).mean().round(3).to_string())
