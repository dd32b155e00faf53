"""The attention of a step's few rows in the loop, side by side: PyTorch's SDPA (``$TALON_CPU_ATTENTION=sdpa``)
against ``row_ops``' C++ grouped attention (``rows``, the default), for plain decoding (``ar``) and for
TALON auto-sized at the CPU defaults, each attention with its own cost curve (the curve's key names the
attention; measured on first use, then cached).

Interleaved per prompt, the headline suite's 30 prompts, greedy, 64 tokens: the four runs in an order that
alternates per prompt and round, ROUNDS rounds, one process.  Every run's tokens are compared with ``ar``
under the same attention and with ``ar`` under the other.

    PYTHONPATH=. python docs/bench/xeon-emr-r59/attention_ab.py ROUNDS OUT.json
"""

from __future__ import annotations

import json
import os
import sys
import time

from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry

MODES = ("sdpa", "rows")


def one_run(target, registry, method: str, mode: str, prompt: str) -> dict:
    os.environ["TALON_CPU_ATTENTION"] = mode
    cfg = TreeConfig(method=method, budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=method != "ar")
    drafter = None if method == "ar" else drafter_for(method, "head", target, registry)
    curve = curve_for_run(target, drafter, cfg) if method != "ar" else None
    t0 = time.perf_counter()
    trace = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=64), prompt, texts=False, cost_curve=curve)
    seconds = time.perf_counter() - t0
    steps = trace.steps
    return {
        "seconds": seconds,
        "ids": [t for s in steps for t in s.committed_ids],
        "steps": len(steps),
        "nodes": [len(s.tree) - 1 for s in steps],
    }


def main(rounds: int, out: str) -> None:
    experiment = get_suite("headline").experiments[0]
    prompts, _ = load_prompts(experiment)
    registry = ModelRegistry()
    target = registry.get("embedded")
    variants = [(m, mode) for mode in MODES for m in ("ar", "talon")]
    for m, mode in variants:  # warm-up, and each attention's curve
        one_run(target, registry, m, mode, prompts[0]["prompt"])
    results = []
    for r in range(rounds):
        for k, item in enumerate(prompts):
            order = variants if (k + r) % 2 == 0 else variants[::-1]
            row = {"round": r, "id": item.get("id", k), "category": item.get("category", ""), "runs": {}}
            for m, mode in order:
                row["runs"][f"{m}/{mode}"] = one_run(target, registry, m, mode, item["prompt"])
            results.append(row)
            runs = row["runs"]
            lossless = all(runs[f"talon/{mode}"]["ids"] == runs[f"ar/{mode}"]["ids"] for mode in MODES)
            same = runs["ar/sdpa"]["ids"] == runs["ar/rows"]["ids"]
            times = " ".join(f"{key}={v['seconds']:.2f}" for key, v in runs.items())
            print(f"r{r} {k + 1}/{len(prompts)} {row['category']}: {times} lossless={lossless} same={same}", flush=True)
            with open(out, "w") as f:
                json.dump(results, f)


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2])
