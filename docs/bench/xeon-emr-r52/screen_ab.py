"""The LM head's bfloat16 screen in the loop against the float32 head, on one loaded embedded target:
plain decoding steps (the real loop, a long plain run advanced a step at a time) and verifications of a
16-node tree, the two heads alternating every round, median of ROUNDS rounds; then the load's own
timing of the two heads alone (``screen_for``'s: random rows, hot caches, least of 15).  From the
repository root, nothing else running:

    PYTHONPATH=. python docs/bench/xeon-emr-r52/screen_ab.py [ROUNDS]"""

import statistics
import sys
from dataclasses import replace

import torch

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.cpu_linear import fastest_each
from talon.models.lm_head import MARGIN, FullScores, ScreenedHead
from talon.models.registry import ModelRegistry

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 40
lm = ModelRegistry().get("embedded")
screen = lm.screen or ScreenedHead.for_model(lm.model)
print(f"loaded with: {'the screen' if lm.screen is not None else 'the float32 head'}")
heads = {"float32 head": replace(lm, screen=None), "bfloat16 screen": replace(lm, screen=screen)}
ids = context_ids(lm)
pieces = {name: _Pieces(target, NoDrafter(), ids, (1, 16), ()) for name, target in heads.items()}
times = {name: {"plain": [], "verify16": []} for name in heads}
for r in range(ROUNDS + 3):
    order = list(pieces.items()) if r % 2 == 0 else list(pieces.items())[::-1]
    for name, p in order:
        plain, verify = p.plain_step(), p.verify(16)
        if r >= 3:  # warm-up rounds
            times[name]["plain"].append(plain)
            times[name]["verify16"].append(verify)
for name, t in times.items():
    plain, verify = statistics.median(t["plain"]), statistics.median(t["verify16"])
    ratio = verify / plain
    print(f"{name:16s} plain step {plain * 1e3:6.2f} ms, verify(16) {verify * 1e3:6.2f} ms = {ratio:.2f} steps")
head = lm.model.get_output_embeddings()
for rows in (1, 16):
    hidden = torch.randn(rows, screen.weight.shape[1]) * 4
    with torch.inference_mode():
        full, scr = fastest_each(
            [lambda h=hidden: FullScores(head(h)).pick(0.0, None), lambda h=hidden: screen.scores(h).pick(0.0, None)]
        )
    share = f"{scr / full:.2f}; kept at <= {MARGIN}"
    print(f"alone, {rows:2d} rows: float32 {full * 1e3:.2f} ms, screen {scr * 1e3:.2f} ms ({share})")
