"""A plain decoding step and verifications of 16 and 32 nodes on the embedded target, before and after
run 54's two changes, each as the loop runs it: the rows' picks (argmax, the screen's top 16) by PyTorch
or by ``talon.models.row_top``'s C++, and the mask passed to each layer's SDPA as bool or additive
(``gqa_attention.additive_mask``, made once a forward), with the float32 LM head and with the bfloat16
screen.  Six variants alternate every round (``$TALON_ROW_OPS``, ``kv_cache.additive_mask`` and the
model's screen swapped between rounds; the norms' and rotary embedding's C++ stay, installed at load);
median of ROUNDS rounds after three warm-up rounds, ms and in plain steps of the same variant.  From the
repository root, nothing else running:

    PYTHONPATH=. python docs/bench/xeon-emr-r54/step_ab.py [ROUNDS]"""

import dataclasses
import os
import statistics
import sys

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.gqa_attention import additive_mask
from talon.models.lm_head import ScreenedHead
from talon.models.registry import ModelRegistry
from talon.runtime import kv_cache

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
SIZES = (16, 32)
CHANGES = {  # name: (TALON_ROW_OPS, the mask kv_cache passes)
    "before": ("0", lambda mask, dtype: mask),
    "C++ picks": ("1", lambda mask, dtype: mask),
    "C++ picks + additive mask": ("1", additive_mask),
}
lm = ModelRegistry().get("embedded")
screen = lm.screen or ScreenedHead.for_model(lm.model)
variants = {}
for head, value in (("float32 head", None), ("bf16 screen", screen)):
    target = dataclasses.replace(lm, screen=value)
    pieces = _Pieces(target, NoDrafter(), context_ids(target), (1, *SIZES), ())
    for change, setting in CHANGES.items():
        variants[f"{head}, {change}"] = (pieces, setting)
times = {name: {"plain": [], **{n: [] for n in SIZES}} for name in variants}
for r in range(ROUNDS + 3):
    order = list(variants.items()) if r % 2 == 0 else list(variants.items())[::-1]
    for name, (pieces, (row_ops, mask)) in order:
        os.environ["TALON_ROW_OPS"], kv_cache.additive_mask = row_ops, mask
        got = {"plain": pieces.plain_step(), **{n: pieces.verify(n) for n in SIZES}}
        if r >= 3:
            for key, value in got.items():
                times[name][key].append(value)
for name, t in times.items():
    plain = statistics.median(t["plain"])
    cells = ", ".join(
        f"verify({n}) {statistics.median(t[n]) * 1e3:6.2f} ms = {statistics.median(t[n]) / plain:.3f}" for n in SIZES
    )
    print(f"{name:40s} plain step {plain * 1e3:6.2f} ms, {cells}")
