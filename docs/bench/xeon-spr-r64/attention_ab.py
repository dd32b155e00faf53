"""The C++ grouped attention of another revision against the working tree's, side by side in one process:
the other ``row_ops.cpp`` built beside this one and swapped in per round (the few-rows kernel lookup
wrapped); the cost suite's pieces (a plain step through the real loop, verify(n) on its trees), medians of
12 rounds of three timings each, the order alternating.

    git show REV:talon/models/csrc/row_ops.cpp > /tmp/row_ops_before.cpp
    PYTHONPATH=. python docs/bench/xeon-spr-r64/attention_ab.py /tmp/row_ops_before.cpp
"""
import statistics, sys, tempfile, torch
from pathlib import Path
from torch.utils import cpp_extension
from talon.models import row_ops, gqa_attention
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.registry import ModelRegistry
torch.set_num_threads(2)
before = cpp_extension.load("talon_row_ops_before", [sys.argv[1]], extra_cflags=row_ops.FLAGS, extra_ldflags=["-fopenmp"], build_directory=tempfile.mkdtemp())
after = row_ops.extension()
target = ModelRegistry().get("embedded")
sizes = [1, 16, 32]
pieces = _Pieces(target, NoDrafter(), context_ids(target), sizes, ())
real = gqa_attention._rows_kernel
builds = {"before": before, "after": after}
times = {(n, p): [] for n in builds for p in ["plain", *sizes]}
for r in range(13):
    for name in (list(builds) if r % 2 == 0 else list(builds)[::-1]):
        ext = builds[name]
        gqa_attention._rows_kernel = lambda *a, ext=ext: (None if real(*a) is None else ext.grouped_attention)
        for p in ["plain", *sizes]:
            for _ in range(3):
                took = pieces.plain_step() if p == "plain" else pieces.verify(p)
                if r: times[(name, p)].append(took)
for name in builds:
    med = {p: statistics.median(times[(name, p)]) * 1e3 for p in ["plain", *sizes]}
    print(f"{name:7s} plain {med['plain']:.2f} ms, " + ", ".join(f"verify({s}) {med[s]:.2f} ms = {med[s]/med['plain']:.3f}x" for s in sizes), flush=True)
