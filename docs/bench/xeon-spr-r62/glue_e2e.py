"""End to end, the glue before and after (see glue_ab.py): ``ar`` and TALON auto at the CPU defaults
(one cached cost curve for both) on the headline suite's first N prompts, greedy, 64 tokens, the four
runs in an order alternating per prompt, one loaded target; total times and the tokens compared.

    git show REV:talon/models/csrc/row_ops.cpp > /tmp/row_ops_before.cpp
    PYTHONPATH=. python docs/bench/xeon-spr-r62/glue_e2e.py N
"""

import sys
import time

from glue_builds import registry, target, use

from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 30

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
for k, item in enumerate(prompts[:RUNS]):
    ids = {}
    for m, r in variants if k % 2 == 0 else variants[::-1]:
        use(r)
        drafter = None if m == "ar" else drafter_for(m, "head", target, registry)
        t0 = time.perf_counter()
        trace = run_to_end(
            target,
            drafter,
            cfg[m],
            DecodeConfig(max_new_tokens=64),
            item["prompt"],
            texts=False,
            cost_curve=curve if m != "ar" else None,
        )
        totals[m, r] += time.perf_counter() - t0
        ids[m, r] = [t for s in trace.steps for t in s.committed_ids]
    agree = len({tuple(v) for v in ids.values()}) == 1
    same += agree
    print(f"{k + 1}/{RUNS}: all four runs the same tokens: {agree}", flush=True)
for m in cfg:
    print(f"{m}: after / before total time {totals[m, 'after'] / totals[m, 'before']:.3f}")
print(
    f"TALON auto x ar: after {totals['ar', 'after'] / totals['talon', 'after']:.3f}, "
    f"before {totals['ar', 'before'] / totals['talon', 'before']:.3f}; same tokens on {same} of {RUNS}"
)
