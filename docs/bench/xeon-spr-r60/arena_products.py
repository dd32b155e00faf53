"""The embedded model's 120 products (random weights of its shapes) on TALON's kernel, each weight in its own
allocation against all of them copied into one tensor in forward order, alternating every round, medians of
12 rounds; run it with and without ``THP_MEM_ALLOC_ENABLE=1``.

    PYTHONPATH=. python docs/bench/xeon-spr-r60/arena_products.py
"""

import os
import statistics
import time

import torch

from talon.models import stream_gemm

ext = stream_gemm.extension()
torch.manual_seed(0)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
packed = [[stream_gemm.pack(torch.randn(o, i) * 0.02) for o, i in SHAPES] for _ in range(30)]
total = sum(p.numel() for L in packed for p in L)
arena = torch.empty(total)
views, off = [], 0
for L in packed:
    row = []
    for p in L:
        v = arena[off : off + p.numel()].view(p.shape)
        v.copy_(p)
        off += p.numel()
        row.append(v)
    views.append(row)
for m in (1, 8, 16, 32):
    xs = {i: torch.randn(m, i) for _, i in SHAPES}
    res = {"separate": [], "arena": []}
    for r in range(14):
        for name, P in (("separate", packed), ("arena", views)) if r % 2 else (("arena", views), ("separate", packed)):
            t0 = time.perf_counter()
            for layer in P:
                for (o, i), p in zip(SHAPES, layer):
                    ext.linear(xs[i], p, o, None)
            res[name].append(time.perf_counter() - t0)
    a, b = (statistics.median(res[n][2:]) for n in ("separate", "arena"))
    print(
        os.environ.get("THP_MEM_ALLOC_ENABLE", "0"),
        f"{m} rows: separate {a * 1e3:.2f}, arena {b * 1e3:.2f} ({b / a:.3f})",
    )
