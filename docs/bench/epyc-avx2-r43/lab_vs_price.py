"""On a quiet machine: does the lab's measured time of a rebuilt tree match its price x the curve's plain step?"""
import time
from talon.config import TreeConfig, DecodeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end, replay
from talon.engine.frozen_step import FrozenStep
from talon.models.registry import ModelRegistry
import os
reg = ModelRegistry()
target = reg.get("embedded")
auto = TreeConfig(method="talon", budget=128, topk=6, mu=0.1, depth=5, auto=True)
drafter = drafter_for("talon", "head", target, reg)
curve = curve_for_run(target, drafter, auto)
print("curve plain ms", curve.plain * 1e3, "busy share", curve.other_share, "measured", curve.measured)
trace = run_to_end(target, drafter, auto, DecodeConfig(max_new_tokens=48), prompt="What are three good habits for getting better sleep? Explain each briefly.", cost_curve=curve)
print("run steps", len(trace.steps), "load", os.getloadavg())
for index in (0, 10, 20):
    frozen = FrozenStep.of_run(target, reg, "head", trace, index)
    for n in (4, 8, 24):
        cfg = TreeConfig(method="talon", budget=n, topk=6, mu=0.1, depth=5)
        for rep in range(3):
            step = frozen.explore(cfg, index)
            took = step.draft_seconds + step.verify_seconds
            priced = step.price * curve.plain if step.price else float("nan")
            print(f"step {index} N={n} rep {rep}: took {took*1e3:.0f} ms (draft {step.draft_seconds*1e3:.0f}, verify {step.verify_seconds*1e3:.0f}), price {step.price:.2f} -> {priced*1e3:.0f} ms, ratio {took/priced:.2f}")
