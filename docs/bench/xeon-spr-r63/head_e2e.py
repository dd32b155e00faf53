"""End to end, the LM head's picks and normalisers before and after the C++ of run 63 (``row_logsumexp``,
``row_reaching``): ``ar`` and TALON auto at the CPU defaults (one cached cost curve for both) on the headline
suite's first N prompts, greedy, 64 tokens, the four runs in an order alternating per prompt, one loaded
target with its LM head given on the command line (``screen``: the bfloat16 screen, ``f32``: the float32
head, whichever the load chose otherwise); "before" runs the PyTorch operations these replace.  Total times
and the tokens compared.

    PYTHONPATH=. python docs/bench/xeon-spr-r63/head_e2e.py N screen|f32
"""

import dataclasses
import sys
from pathlib import Path

import torch

from talon.models import lm_head, row_top
from talon.models.registry import ModelRegistry

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from side_by_side import ar_and_talon_auto  # noqa: E402  (docs/bench/side_by_side.py)

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 20
HEAD = sys.argv[2] if len(sys.argv) > 2 else "screen"

torch.set_num_threads(2)
registry = ModelRegistry()
target = registry.get("embedded")
target = dataclasses.replace(target, screen=lm_head.ScreenedHead.for_model(target.model) if HEAD == "screen" else None)
after = (lm_head.row_logsumexp, row_top.native_rows)


def torch_logsumexp(scores, rows=None, scale=1.0):
    picked = scores if rows is None else scores[rows]
    return torch.logsumexp(picked if scale == 1.0 else picked * scale, dim=-1)


def use(revision: str) -> None:
    lm_head.row_logsumexp, row_top.native_rows = after if revision == "after" else (torch_logsumexp, lambda _: False)


print(f"LM head: {lm_head.head_name(target)}", flush=True)
ar_and_talon_auto(target, registry, use, ("before", "after"), new="after", old="before", runs=RUNS)
