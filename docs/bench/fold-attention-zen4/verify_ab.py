"""verify(n) of the embedded target with the grouped query heads folded into one head's rows for 2-16 query
rows (a patch of ``talon.models.gqa_attention``'s CPU branch, not kept: it sets ``FOLD_ROWS``, which the
patched module read) against SDPA's ``enable_gqa``, 30 shuffled rounds, medians.  Output (2026-11-27,
twenty-eighth session): verify(1) 21.19 / 21.58 ms, verify(3) 24.13 / 23.57, verify(5) 23.88 / 23.36,
verify(7) 26.41 / 26.31, verify(9) 27.14 / 26.26, verify(16) 30.84 / 29.92, verify(32) 41.77 / 41.49."""
import random, statistics, json, sys, torch
import talon.models.gqa_attention as G
from talon.models.registry import ModelRegistry
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
torch.set_num_threads(2)
reg = ModelRegistry(); target = reg.get("embedded")
ids = context_ids(target)
sizes = [1, 3, 5, 7, 9, 16, 32]
p = _Pieces(target, NoDrafter(), ids, sizes, ())
jobs = [(n, f) for n in sizes for f in (True, False)]
res = {j: [] for j in jobs}
rnd = random.Random(0)
for r in range(30):
    rnd.shuffle(jobs)
    for n, f in jobs:
        G.FOLD_ROWS = (2, 16) if f else (99, 0)
        res[(n, f)].append(p.verify(n))
for n in sizes:
    a, b = statistics.median(res[(n, True)]), statistics.median(res[(n, False)])
    print(f"verify({n}) fold {a*1e3:.2f} ms, gqa {b*1e3:.2f} ms, ratio {a/b:.3f}")
p.close()
