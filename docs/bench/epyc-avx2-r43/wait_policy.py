"""Decode speed of ar and TALON auto under this process's OpenMP wait settings (env), 3 prompts x 48 tokens."""
import os, sys, time
from talon.config import TreeConfig, DecodeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry
from ui.shared import priced_step_ratio
reg = ModelRegistry()
target = reg.get("embedded")
prompts = ["What are three good habits for getting better sleep? Explain each briefly.",
           "List the months of the year in order, one per line.",
           "Write a Python function that returns the n-th Fibonacci number."]
auto = TreeConfig(method="talon", budget=128, topk=6, mu=0.1, depth=5, auto=True)
curve = curve_for_run(target, drafter_for("talon", "head", target, reg), auto)
label = sys.argv[1]
for rep in range(int(os.environ.get("REPS", "2"))):
    for method in ("ar", "talon"):
        secs, toks, ratios = 0.0, 0, []
        for p in prompts:
            drafter = drafter_for(method, "head", target, reg)
            cfg = auto if method == "talon" else TreeConfig(method="ar")
            t0 = time.perf_counter()
            trace = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=48), prompt=p, cost_curve=curve)
            secs += time.perf_counter() - t0
            toks += len(trace.output_ids)
            r = priced_step_ratio([trace])
            if r: ratios.append(r)
        print(f"{label:>14} rep{rep} {method:>5}: {toks/secs:5.1f} tok/s  priced ratio {sum(ratios)/len(ratios) if ratios else float('nan'):.2f}  load {os.getloadavg()[0]:.1f}", flush=True)
