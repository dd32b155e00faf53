"""In one process under OMP_WAIT_POLICY=PASSIVE (the app's): TALON auto sized by the curve measured under the
default wait (A) against the curve measured under passive waiting (B), interleaved per prompt."""
import os, statistics, time
assert os.environ.get("OMP_WAIT_POLICY") == "PASSIVE"
from talon.config import TreeConfig, DecodeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_key
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry
from talon.runtime.cost_curve import cached_curve
from talon.bench.prompts import read_prompts
from ui.shared import priced_step_ratio
reg = ModelRegistry()
target = reg.get("embedded")
d = drafter_for("talon", "head", target, reg)
curve_b = cached_curve(curve_key(target, d))
del os.environ["OMP_WAIT_POLICY"]
curve_a = cached_curve(curve_key(target, d))
os.environ["OMP_WAIT_POLICY"] = "PASSIVE"
print("A plain", curve_a.plain, "B plain", curve_b.plain)
print("A verify", [(n, round(s / curve_a.plain, 2)) for n, s in curve_a.verify[:8]])
print("B verify", [(n, round(s / curve_b.plain, 2)) for n, s in curve_b.verify[:8]])
auto = TreeConfig(method="talon", budget=128, topk=6, mu=0.1, depth=5, auto=True)
prompts = [r["prompt"] for r in read_prompts("assets/prompts.jsonl")]
tot = {"A": 0.0, "B": 0.0, "ar": 0.0}; toks = {"A": 0, "B": 0, "ar": 0}; nodes = {"A": [], "B": []}; per = []
for i, p in enumerate(prompts):
    order = ["A", "B", "ar"] if i % 2 == 0 else ["ar", "B", "A"]
    secs = {}
    outs = {}
    for side in order:
        drafter = None if side == "ar" else drafter_for("talon", "head", target, reg)
        cfg = TreeConfig(method="ar") if side == "ar" else auto
        curve = curve_a if side == "A" else curve_b
        t0 = time.perf_counter()
        tr = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=48), prompt=p, cost_curve=curve)
        secs[side] = time.perf_counter() - t0
        outs[side] = tr.output_ids
        tot[side] += secs[side]; toks[side] += len(tr.output_ids)
        if side != "ar":
            nodes[side] += [s.tree.num_drafts for s in tr.steps]
    assert outs["A"] == outs["B"] == outs["ar"], i
    per.append(secs["A"] / secs["B"])
    print(f"{i:2d} A/B {secs['A']/secs['B']:.3f}  A {toks['A'] and len(outs['A'])/secs['A']:.1f} B {len(outs['B'])/secs['B']:.1f} ar {len(outs['ar'])/secs['ar']:.1f} tok/s", flush=True)
print(f"A (default-wait curve): {toks['A']/tot['A']:.1f} tok/s, {statistics.mean(nodes['A']):.1f} nodes/step; "
      f"B (passive curve): {toks['B']/tot['B']:.1f} tok/s, {statistics.mean(nodes['B']):.1f} nodes/step; ar {toks['ar']/tot['ar']:.1f}")
print(f"B faster by {tot['A']/tot['B']:.3f} pooled; per prompt median {statistics.median(per):.3f} ({min(per):.3f}-{max(per):.3f}), B faster on {sum(x > 1 for x in per)} of {len(per)}")
