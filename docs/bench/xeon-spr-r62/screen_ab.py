"""In the loop: the screened LM head against the float32 one, a plain step and verify(n), alternating
every round (two loops over one loaded target, one with each head), medians.

    PYTHONPATH=. python docs/bench/xeon-spr-r62/screen_ab.py ROUNDS
"""
import dataclasses, statistics, sys, torch
from talon.models.registry import ModelRegistry
from talon.models.lm_head import ScreenedHead
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
torch.set_num_threads(2)
target = ModelRegistry().get("embedded")
screen = ScreenedHead.for_model(target.model)
variants = {"f32": dataclasses.replace(target, screen=None), "screen": dataclasses.replace(target, screen=screen)}
ids = context_ids(target)
sizes = [4, 8, 16, 32]
pieces = {k: _Pieces(lm, NoDrafter(), ids, [1] + sizes, ()) for k, lm in variants.items()}
rounds = int(sys.argv[1])
t = {(k, s): [] for k in variants for s in [0] + sizes}
for r in range(rounds + 2):
    for k in (list(variants) if r % 2 else list(variants)[::-1]):
        p = pieces[k]
        vals = {0: p.plain_step()}
        for s in sizes:
            vals[s] = p.verify(s)
        if r >= 2:
            for s, v in vals.items():
                t[(k, s)].append(v)
for k in variants:
    plain = statistics.median(t[(k, 0)])
    print(k, f"plain {plain*1e3:.2f} ms", " ".join(f"v({s}) {statistics.median(t[(k, s)])*1e3:.2f} ({statistics.median(t[(k, s)])/plain:.3f})" for s in sizes))
