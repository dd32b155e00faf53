"""Per category of the headline suite (30 prompts, 64 tokens, greedy, the cached cost curve): hybrid auto's
mean expected committed tokens a step (E) against what it committed (R), steps and draft nodes a step.
No timing: the trees follow from the drafter, the calibration and the cost curve, so the figures are the
same on every run with the same curve.

    PYTHONPATH=. python docs/bench/lookup-ngram8-cpu-epyc/study.py [--max-ngram N]

``--max-ngram`` overrides prompt lookup's longest n-gram (the drafter's default otherwise).  Run on the
tree as committed and after ``git apply docs/bench/lookup-ngram8-cpu-epyc/ngram8.patch``.
"""

import argparse
from collections import defaultdict

from talon.bench.prompts import load_prompt_set
from talon.bench.suites import HEADLINE_PROMPTS
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import cost_curve_for
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry


def main(max_ngram: int | None) -> None:
    prompts = [p for ps in HEADLINE_PROMPTS for p in load_prompt_set(ps)[0]]
    registry = ModelRegistry()
    target = registry.get("embedded")
    drafter = drafter_for("hybrid", "head", target, registry)
    if max_ngram:
        drafter.retrieval.max_ngram = max_ngram
    curve = cost_curve_for(target, drafter)
    cfg = TreeConfig(method="hybrid", budget=128, topk=6, mu=0.1, auto=True)
    sums: dict[str, list[float]] = defaultdict(lambda: [0, 0.0, 0.0, 0])  # steps, E, R, nodes
    for p in prompts:
        trace = run_to_end(
            target, drafter, cfg, DecodeConfig(max_new_tokens=64), p["prompt"], texts=False, cost_curve=curve
        )
        for key in (p["category"], "all"):
            s = sums[key]
            s[0] += len(trace.steps)
            s[1] += sum(x.expected for x in trace.steps)
            s[2] += sum(x.accepted_tokens + 1 for x in trace.steps)
            s[3] += sum(len(x.tree) - 1 for x in trace.steps)
    print(f"lookup max n-gram {drafter.retrieval.max_ngram}")
    for key, (steps, e, r, nodes) in sums.items():
        per_step = f"E {e / steps:.2f}  R {r / steps:.2f}  E/R {e / r - 1:+4.0%}  nodes {nodes / steps:.2f}"
        print(f"{key:14s} steps {steps:4d}  {per_step}")


if __name__ == "__main__":
    cli = argparse.ArgumentParser()
    cli.add_argument("--max-ngram", type=int)
    main(cli.parse_args().max_ngram)
