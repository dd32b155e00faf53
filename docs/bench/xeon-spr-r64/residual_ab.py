"""Side by side in one process: the decoder layers' residuals added by the products that end their
branches (``fused_linear.hand_residuals``) against the class's own forward (a separate addition),
switched per round; the cost suite's pieces (a plain step through the real loop, verify(n) on its
trees), medians of ROUNDS rounds, and each piece's ratio to the plain step.

    PYTHONPATH=. python docs/bench/xeon-spr-r64/residual_ab.py [ROUNDS]
"""

import statistics
import sys
import types

import torch

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models import fused_linear
from talon.models.registry import ModelRegistry

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 15
torch.set_num_threads(2)
target = ModelRegistry().get("embedded")
layers = [m for m in target.model.modules() if "forward" in vars(m) and type(m).__name__ == "LlamaDecoderLayer"]
print(f"{len(layers)} layers hand their residuals", flush=True)


def handing(on: bool) -> None:
    for layer in layers:
        if on:
            layer.forward = types.MethodType(fused_linear._residual_layer_forward, layer)
        else:
            vars(layer).pop("forward", None)


sizes = [1, 16, 32]
pieces = _Pieces(target, NoDrafter(), context_ids(target), sizes, ())
times = {(mode, piece): [] for mode in ("separate", "handed") for piece in ["plain", *sizes]}


def run(piece):
    return pieces.plain_step() if piece == "plain" else pieces.verify(piece)


for r in range(ROUNDS + 2):
    for mode in ("separate", "handed") if r % 2 == 0 else ("handed", "separate"):
        handing(mode == "handed")
        for piece in ["plain", *sizes]:
            for _ in range(3):
                took = run(piece)
                if r >= 2:
                    times[(mode, piece)].append(took)
handing(True)
for mode in ("separate", "handed"):
    med = {p: statistics.median(times[(mode, p)]) * 1e3 for p in ["plain", *sizes]}
    print(
        f"{mode:9s} plain {med['plain']:.2f} ms, "
        + ", ".join(f"verify({s}) {med[s]:.2f} ms = {med[s] / med['plain']:.3f}x" for s in sizes)
    )
