"""Verification of 1..12 and 16 nodes (heap trees, the cost suite's) as a ratio to the plain step timed just before it, 25 shuffled rounds.
Run from the repository root: PYTHONPATH=. python docs/bench/verify-dip-zen4/verify_per_size.py"""

import statistics, random, torch
from talon.models.registry import ModelRegistry
from talon.engine.cost_measure import _Pieces, context_ids
from talon.drafters.base import NoDrafter

reg = ModelRegistry()
target = reg.get("embedded")
ids = context_ids(target, 128)
sizes = tuple(range(1, 13)) + (16,)
p = _Pieces(target, NoDrafter(), ids, sizes, ())
for s in sizes:
    p.verify(s)
r = {s: [] for s in sizes}
for _ in range(25):
    order = list(sizes)
    random.shuffle(order)
    for s in order:
        pl = p.plain_step()
        r[s].append(p.verify(s) / pl)
for s in sizes:
    v = sorted(r[s])
    print(s, "median %.3f  q1 %.3f q3 %.3f" % (statistics.median(v), v[len(v) // 4], v[3 * len(v) // 4]))
