"""TALON's kernel as committed at REV against the working tree's, side by side in one process: the other
revision built beside this one (``stream_gemm.load_build`` with a suffix) and swapped in per round; the cost
suite's pieces (a plain step through the real loop, verify(n) on its trees), medians of ROUNDS rounds of three
timings each, the order alternating, and each piece's ratio to the plain step.

    git show REV:talon/models/csrc/stream_gemm.cpp > /tmp/before.cpp
    PYTHONPATH=. python docs/bench/xeon-spr-r64/kernel_ab.py /tmp/before.cpp [ROUNDS]
"""

import statistics
import sys
import tempfile
from pathlib import Path

import torch

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models import stream_gemm
from talon.models.registry import ModelRegistry

ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 15
torch.set_num_threads(2)
target = ModelRegistry().get("embedded")
builds = {
    "before": stream_gemm.load_build(
        stream_gemm.instruction_set(), tempfile.mkdtemp(), Path(sys.argv[1]), suffix="_before"
    ),
    "after": stream_gemm.extension(),
}
sizes = [1, 16, 24, 32]
pieces = _Pieces(target, NoDrafter(), context_ids(target), sizes, ())
times = {(name, piece): [] for name in builds for piece in ["plain", *sizes]}
for r in range(ROUNDS + 1):
    for name in list(builds) if r % 2 == 0 else list(builds)[::-1]:
        stream_gemm.extension = lambda build=builds[name]: build
        for piece in ["plain", *sizes]:
            for _ in range(3):
                took = pieces.plain_step() if piece == "plain" else pieces.verify(piece)
                if r >= 1:
                    times[(name, piece)].append(took)
for name in builds:
    med = {p: statistics.median(times[(name, p)]) * 1e3 for p in ["plain", *sizes]}
    print(
        f"{name:7s} plain {med['plain']:.2f} ms, "
        + ", ".join(f"verify({s}) {med[s]:.2f} ms = {med[s] / med['plain']:.3f}x" for s in sizes),
        flush=True,
    )
