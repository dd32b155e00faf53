"""The end-to-end side by side that several sessions' bench scripts run: ``ar`` and TALON auto at the CPU
defaults (one cached cost curve for every variant) on the headline suite's first ``runs`` prompts, greedy,
64 tokens, every method under each of two variants of one loaded target, the four runs in an order
alternating per prompt; prints per prompt whether all four gave the same tokens, then each method's total
time under ``new`` over under ``old`` and TALON auto's speedup over ``ar`` under each.

A script in a folder beside this one imports it with that folder's parent on ``sys.path``."""

import time
from collections.abc import Callable

from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end

CONFIGS = {
    "ar": TreeConfig(method="ar"),
    "talon": TreeConfig(method="talon", budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=True),
}


def ar_and_talon_auto(
    target, registry, use: Callable[[str], None], order: tuple[str, str], new: str, old: str, runs: int
) -> None:
    """``use(name)`` switches the target to a variant; ``order`` gives the two variants in the order a
    prompt runs them first (reversed every other prompt); the cost curve is measured under ``new``."""
    prompts, _ = load_prompts(get_suite("headline").experiments[0])
    use(new)
    curve = curve_for_run(target, drafter_for("talon", "head", target, registry), CONFIGS["talon"])
    totals = {(m, v): 0.0 for m in CONFIGS for v in order}
    variants = [(m, v) for v in order for m in CONFIGS]
    same = 0
    for k, item in enumerate(prompts[:runs]):
        ids = {}
        for m, v in variants if k % 2 == 0 else variants[::-1]:
            use(v)
            drafter = None if m == "ar" else drafter_for(m, "head", target, registry)
            t0 = time.perf_counter()
            trace = run_to_end(
                target,
                drafter,
                CONFIGS[m],
                DecodeConfig(max_new_tokens=64),
                item["prompt"],
                texts=False,
                cost_curve=curve if m != "ar" else None,
            )
            totals[m, v] += time.perf_counter() - t0
            ids[m, v] = [t for s in trace.steps for t in s.committed_ids]
        agree = len({tuple(x) for x in ids.values()}) == 1
        same += agree
        print(f"{k + 1}/{runs}: all four runs the same tokens: {agree}", flush=True)
    for m in CONFIGS:
        print(f"{m}: {new} / {old} total time {totals[m, new] / totals[m, old]:.3f}")
    print(
        f"TALON auto x ar: {new} {totals['ar', new] / totals['talon', new]:.3f}, "
        f"{old} {totals['ar', old] / totals['talon', old]:.3f}; same tokens on {same} of {runs}"
    )
