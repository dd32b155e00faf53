"""The target's streamed weights in one huge-page buffer in forward order (``weight_arena``, what a load now
does) against each in its own allocation (before), side by side: a plain decoding step and verifications of
4 to 32 nodes on the embedded target, the two layouts swapped every round (each ``PackedWeight`` pointed at
its slice of the arena or at a separate copy, ordinary pages); medians of ROUNDS rounds after two warm-up
ones.  With ``--runs N``, also ``ar`` and TALON auto at the CPU defaults (one cached cost curve) on the
headline suite's first N prompts (greedy, 64 tokens), the four runs in an order alternating per prompt,
tokens compared.

    PYTHONPATH=. python docs/bench/xeon-spr-r60/arena_ab.py [ROUNDS] [--runs N]
"""

import statistics
import sys
import time

from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.base import NoDrafter
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import _Pieces, context_ids, curve_for_run
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry
from talon.models.weight_arena import gathered_bytes, streamed_weights

args = sys.argv[1:]
ROUNDS = int(args[0]) if args and args[0].isdigit() else 30
RUNS = int(args[args.index("--runs") + 1]) if "--runs" in args else 0
registry = ModelRegistry()
target = registry.get("embedded")
weights = streamed_weights(target.model)
assert gathered_bytes(target.model), "the load gathered nothing: no weights on TALON's kernel here"
layouts = {"arena": [w.data for w in weights], "separate": [w.data.clone() for w in weights]}


def use(layout: str) -> None:
    for weight, data in zip(weights, layouts[layout]):
        weight.data = data


SIZES = (4, 8, 16, 32)
pieces = _Pieces(target, NoDrafter(), context_ids(target), (1, *SIZES), ())
times = {name: {"plain": [], **{n: [] for n in SIZES}} for name in layouts}
for r in range(ROUNDS + 2):
    for name in list(layouts) if r % 2 == 0 else list(layouts)[::-1]:
        use(name)
        got = {"plain": pieces.plain_step(), **{n: pieces.verify(n) for n in SIZES}}
        if r >= 2:
            for key, value in got.items():
                times[name][key].append(value)
for name, t in times.items():
    plain = statistics.median(t["plain"])
    cells = ", ".join(f"verify({n}) {(v := statistics.median(t[n])) * 1e3:6.2f} ms = {v / plain:.3f}" for n in SIZES)
    print(f"{name:8s} plain step {plain * 1e3:6.2f} ms, {cells}", flush=True)
if RUNS:
    prompts, _ = load_prompts(get_suite("headline").experiments[0])
    cfg = {
        "ar": TreeConfig(method="ar"),
        "talon": TreeConfig(method="talon", budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=True),
    }
    use("arena")  # one cached curve for both layouts: only where the weights lie differs
    curve = curve_for_run(target, drafter_for("talon", "head", target, registry), cfg["talon"])
    totals = {(m, layout): 0.0 for m in cfg for layout in layouts}
    same = 0
    variants = [(m, layout) for layout in layouts for m in cfg]
    for k, item in enumerate(prompts[:RUNS]):
        ids = {}
        for m, layout in variants if k % 2 == 0 else variants[::-1]:
            use(layout)
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
            totals[m, layout] += time.perf_counter() - t0
            ids[m, layout] = [t for s in trace.steps for t in s.committed_ids]
        agree = len({tuple(v) for v in ids.values()}) == 1
        same += agree
        print(f"{k + 1}/{RUNS}: all four runs the same tokens: {agree}", flush=True)
    for m in cfg:
        print(f"{m}: arena / separate total time {totals[m, 'arena'] / totals[m, 'separate']:.3f}")
    print(
        f"TALON auto x ar: arena {totals['ar', 'arena'] / totals['talon', 'arena']:.3f}, "
        f"separate {totals['ar', 'separate'] / totals['talon', 'separate']:.3f}; same tokens on {same} of {RUNS}"
    )
