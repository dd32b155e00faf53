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
from pathlib import Path

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
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
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from side_by_side import ar_and_talon_auto  # docs/bench/side_by_side.py

    ar_and_talon_auto(target, registry, use, tuple(layouts), new="arena", old="separate", runs=RUNS)
