"""A/B: TALON auto with the shipped head, its few-row calls on bfloat16 copies (A, the new default on a
float32-drafting CPU) against float32 only (B); the headline suite's 30 prompts, 64 tokens, greedy,
interleaved per prompt (order alternating), wall clock; each side's cost curve measured here first."""
import statistics, sys, time
import torch
from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig, device_default_tree
from talon.drafters.factory import make_drafter
from talon.drafters.head import HeadDrafter
from talon.drafters.head_model import SHIPPED_HEAD, load_head
from talon.engine.cost_measure import measure_curve
from talon.engine.decode import encode_prompt, run_to_end
from talon.models.cpu_linear import PackedLinear
from talon.models.registry import ModelRegistry

reg = ModelRegistry(); target = reg.get("embedded")
a0 = make_drafter("head", target, reg)
head_b = load_head(SHIPPED_HEAD, target)
for m in head_b.modules():
    if isinstance(m, PackedLinear):
        m.half_rows = 0
assert any(m.half_rows for m in a0.head.modules() if isinstance(m, PackedLinear))
def fresh(side):
    if side == "A":
        return make_drafter("head", target, reg)
    d = HeadDrafter(head_b, target, a0.name)
    d.calibration_prior = a0.calibration_prior
    return d
curves = {}
for side in ("A", "B", "A", "B"):
    t0 = time.perf_counter(); c = measure_curve(target, fresh(side)); curves.setdefault(side, []).append(c)
    print(side, "curve", round(time.perf_counter() - t0, 1), "s: call(1)", round(c.call_seconds(1) * 1e3, 2), "ms, root", round(c.root * 1e3, 2), "plain", round(c.plain * 1e3, 2), flush=True)
curve = {s: v[-1] for s, v in curves.items()}
cfg = TreeConfig(**{**vars(device_default_tree(False)[0]), "auto": True, "budget": 128})
dec = DecodeConfig(max_new_tokens=64)
exp = get_suite("headline").experiments[0]
prompts, _ = load_prompts(exp)
secs = {"A": [], "B": []}; nodes = {"A": [], "B": []}
for n, item in enumerate(prompts):
    ids = encode_prompt(target, item["prompt"])
    out = {}
    for side in (("A", "B") if n % 2 == 0 else ("B", "A")):
        t0 = time.perf_counter()
        tr = run_to_end(target, fresh(side), cfg, dec, prompt_ids=ids, texts=False, cost_curve=curve[side])
        secs[side].append(time.perf_counter() - t0); out[side] = tr.output_ids
        nodes[side].append(sum(len(s.tree) - 1 for s in tr.steps) / len(tr.steps))
    assert out["A"] == out["B"], item["id"]
    print(item["id"], "A/B time", round(secs["A"][-1] / secs["B"][-1], 3), flush=True)
ratios = [b / a for a, b in zip(secs["A"], secs["B"])]
print("total A", round(sum(secs["A"]), 2), "B", round(sum(secs["B"]), 2), "B/A", round(sum(secs["B"]) / sum(secs["A"]), 3))
print("per prompt B/A: median", round(statistics.median(ratios), 3), "min", round(min(ratios), 3), "max", round(max(ratios), 3), "A faster on", sum(r > 1 for r in ratios), "of", len(ratios))
print("nodes/step A", round(statistics.mean(nodes["A"]), 2), "B", round(statistics.mean(nodes["B"]), 2))
