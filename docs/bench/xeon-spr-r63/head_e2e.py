"""End to end, the LM head's picks and normalisers before and after the C++ of run 63 (``row_logsumexp``,
``row_reaching``): ``ar`` and TALON auto at the CPU defaults (one cached cost curve for both) on the headline
suite's first N prompts, greedy, 64 tokens, the four runs in an order alternating per prompt, one loaded
target with its LM head given on the command line (``screen``: the bfloat16 screen, ``f32``: the float32
head, whichever the load chose otherwise); "before" runs the PyTorch operations these replace.  Total times
and the tokens compared.

    PYTHONPATH=. python docs/bench/xeon-spr-r63/head_e2e.py N screen|f32
"""

import dataclasses
import sys
import time

import torch

from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end
from talon.models import lm_head, row_top
from talon.models.registry import ModelRegistry

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
HEAD = sys.argv[2] if len(sys.argv) > 2 else "screen"

torch.set_num_threads(2)
registry = ModelRegistry()
target = registry.get("embedded")
target = dataclasses.replace(target, screen=lm_head.ScreenedHead.for_model(target.model) if HEAD == "screen" else None)
after = (lm_head.row_logsumexp, row_top.native_rows)


def torch_logsumexp(scores, rows=None, scale=1.0):
    picked = scores if rows is None else scores[rows]
    return torch.logsumexp(picked if scale == 1.0 else picked * scale, dim=-1)


def use(revision: str) -> None:
    lm_head.row_logsumexp, row_top.native_rows = after if revision == "after" else (torch_logsumexp, lambda _: False)


prompts, _ = load_prompts(get_suite("headline").experiments[0])
cfg = {
    "ar": TreeConfig(method="ar"),
    "talon": TreeConfig(method="talon", budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=True),
}
curve = curve_for_run(target, drafter_for("talon", "head", target, registry), cfg["talon"])
revisions = ("before", "after")
totals = {(m, r): 0.0 for m in cfg for r in revisions}
variants = [(m, r) for r in revisions for m in cfg]
same = 0
print(f"LM head: {lm_head.head_name(target)}", flush=True)
for k, item in enumerate(prompts[:RUNS]):
    ids = {}
    for m, r in variants if k % 2 == 0 else variants[::-1]:
        use(r)
        drafter = None if m == "ar" else drafter_for(m, "head", target, registry)
        t0 = time.perf_counter()
        trace = run_to_end(
            target, drafter, cfg[m], DecodeConfig(max_new_tokens=64), item["prompt"], texts=False,
            cost_curve=curve if m != "ar" else None,
        )
        totals[m, r] += time.perf_counter() - t0
        ids[m, r] = [t for s in trace.steps for t in s.committed_ids]
    agree = len({tuple(v) for v in ids.values()}) == 1
    same += agree
    print(f"{k + 1}/{RUNS}: all four runs the same tokens: {agree}", flush=True)
use("after")
for m in cfg:
    print(f"{m}: after / before total time {totals[m, 'after'] / totals[m, 'before']:.3f}")
print(
    f"TALON auto x ar: after {totals['ar', 'after'] / totals['talon', 'after']:.3f}, "
    f"before {totals['ar', 'before'] / totals['talon', 'before']:.3f}; same tokens on {same} of {RUNS}"
)
