"""A plain decoding step and verifications of 16 and 32 nodes on the embedded target, each as the loop
runs it, with the attention of a step's few rows in PyTorch's SDPA (``$TALON_CPU_ATTENTION=sdpa``) or in
``row_ops``' C++ grouped attention (``rows``, the default), with the float32 LM head and with the
bfloat16 screen.  The four variants alternate every round (the environment variable is read at every
forward); median of ROUNDS rounds after three warm-up rounds, ms and in plain steps of the same variant.
From the repository root, nothing else running:

    PYTHONPATH=. python docs/bench/xeon-emr-r59/step_ab.py [ROUNDS]"""

import dataclasses
import os
import statistics
import sys

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.lm_head import ScreenedHead
from talon.models.registry import ModelRegistry

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
SIZES = (4, 8, 16, 32)
lm = ModelRegistry().get("embedded")
screen = lm.screen or ScreenedHead.for_model(lm.model)
variants = {}
for head, value in (("float32 head", None), ("bf16 screen", screen)):
    target = dataclasses.replace(lm, screen=value)
    pieces = _Pieces(target, NoDrafter(), context_ids(target), (1, *SIZES), ())
    for attention in ("sdpa", "rows"):
        variants[f"{head}, attention {attention}"] = (pieces, attention)
times = {name: {"plain": [], **{n: [] for n in SIZES}} for name in variants}
for r in range(ROUNDS + 3):
    order = list(variants.items()) if r % 2 == 0 else list(variants.items())[::-1]
    for name, (pieces, attention) in order:
        os.environ["TALON_CPU_ATTENTION"] = attention
        got = {"plain": pieces.plain_step(), **{n: pieces.verify(n) for n in SIZES}}
        if r >= 3:
            for key, value in got.items():
                times[name][key].append(value)
for name, t in times.items():
    plain = statistics.median(t["plain"])
    cells = ", ".join(
        f"verify({n}) {statistics.median(t[n]) * 1e3:6.2f} ms = {statistics.median(t[n]) / plain:.3f}" for n in SIZES
    )
    print(f"{name:32s} plain step {plain * 1e3:6.2f} ms, {cells}")
