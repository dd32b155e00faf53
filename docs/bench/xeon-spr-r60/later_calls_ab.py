"""Pricing a step's third and later drafter calls at their own measured cost, side by side (2026-12-02,
session 60).

The cost curve priced every drafter call after a step's first at ``call(w)``, timed as a step's second
call.  Timed inside real runs, later calls cost less: the calls before them have just read the
drafter's weights back into the caches (on this machine a one-node head call took 2.4 ms as a step's
second call, 2.0 as its third and 1.7 from its fourth, against 2.7 priced).  The curve now also measures
``later(w)``, a call right after another call of the same step.  Here one measured curve is used twice:
as measured (``later``) and with ``later`` dropped (every call after the first priced as ``call``, the
rule before this change), so only the pricing differs.

Interleaved per prompt, the headline suite's 30 prompts, greedy, 64 tokens: ``ar``, then TALON auto at
the CPU defaults under either pricing in an order alternating per prompt and round, ROUNDS rounds, one
process.  Each run's tokens are compared with ``ar``'s.

    PYTHONPATH=. python docs/bench/xeon-spr-r60/later_calls_ab.py ROUNDS OUT.json [METHOD]
"""

from __future__ import annotations

import dataclasses
import json
import sys
import time

from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry


def one_run(target, registry, method: str, curve, prompt: str) -> dict:
    cfg = TreeConfig(method=method, budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=method != "ar")
    drafter = None if method == "ar" else drafter_for(method, "head", target, registry)
    t0 = time.perf_counter()
    trace = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=64), prompt, texts=False, cost_curve=curve)
    seconds = time.perf_counter() - t0
    steps = trace.steps
    return {
        "seconds": seconds,
        "ids": [t for s in steps for t in s.committed_ids],
        "steps": len(steps),
        "nodes": [len(s.tree) - 1 for s in steps],
        "depth": [s.tree.max_depth for s in steps],
        "expected": [s.expected for s in steps],
        "committed": [len(s.committed_ids) for s in steps],
    }


def main(rounds: int, out: str, method: str = "talon") -> None:
    prompts, _ = load_prompts(get_suite("headline").experiments[0])
    registry = ModelRegistry()
    target = registry.get("embedded")
    cfg = TreeConfig(method=method, budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=True)
    measured = curve_for_run(target, drafter_for(method, "head", target, registry), cfg)
    curves = {"later": measured, "as_call": dataclasses.replace(measured, later=())}
    print(f"curve: plain {measured.plain * 1e3:.2f} ms, call {measured.call}, later {measured.later}", flush=True)
    one_run(target, registry, "ar", None, prompts[0]["prompt"])  # warm-up
    results = []
    for r in range(rounds):
        for k, item in enumerate(prompts):
            order = list(curves) if (k + r) % 2 == 0 else list(curves)[::-1]
            row = {"round": r, "id": item.get("id", k), "category": item.get("category", ""), "runs": {}}
            row["runs"]["ar"] = one_run(target, registry, "ar", None, item["prompt"])
            for name in order:
                row["runs"][name] = one_run(target, registry, method, curves[name], item["prompt"])
            results.append(row)
            runs = row["runs"]
            lossless = all(runs[n]["ids"] == runs["ar"]["ids"] for n in curves)
            times = " ".join(f"{key}={v['seconds']:.2f}" for key, v in runs.items())
            print(f"r{r} {k + 1}/{len(prompts)} {row['category']}: {times} lossless={lossless}", flush=True)
            with open(out, "w") as f:
                json.dump({"curve": measured.to_dict(), "results": results}, f)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2], *sys.argv[3:])
