"""TALON's float32 kernel alone, before and after chunks: the embedded model's 120 products (30 layers x
fused q/k/v, o, fused gate/up, down) at each row count, the revision before the change (built from git
beside the current one, the same packed layout) and the chunked one alternating every round, medians of 14
rounds after two warm-up ones; each product's outputs compared bitwise first.

    git show BEFORE:talon/models/csrc/stream_gemm.cpp > /tmp/stream_gemm_before.cpp
    PYTHONPATH=. python docs/bench/xeon-spr-r60/kernel_chunk_micro.py ROWS... [--before /tmp/stream_gemm_before.cpp]
"""

import statistics
import sys
import time
from pathlib import Path

import torch

from talon.models import stream_gemm

args = sys.argv[1:]
before_path = Path(args[args.index("--before") + 1]) if "--before" in args else Path("/tmp/stream_gemm_before.cpp")
rows_list = [int(a) for a in args if a.isdigit()] or [1, 4, 8, 9, 12, 16, 24, 32, 48, 64]
before = stream_gemm.load_build(stream_gemm.instruction_set(), source=before_path, suffix="_before")
kernels = {"before": before.linear, "chunked": stream_gemm.extension().linear}
torch.manual_seed(0)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
packed = [[stream_gemm.pack(torch.randn(o, i) * 0.02) for o, i in SHAPES] for _ in range(30)]
for m in rows_list:
    xs = {i: torch.randn(m, i) for _, i in SHAPES}
    for (o, i), p in zip(SHAPES, packed[0]):
        assert torch.equal(kernels["before"](xs[i], p, o, None), kernels["chunked"](xs[i], p, o, None))
    times = {name: [] for name in kernels}
    for r in range(16):
        for name, fn in list(kernels.items()) if r % 2 else list(kernels.items())[::-1]:
            t0 = time.perf_counter()
            for layer in packed:
                for (o, i), p in zip(SHAPES, layer):
                    fn(xs[i], p, o, None)
            if r >= 2:
                times[name].append(time.perf_counter() - t0)
    b, c = (statistics.median(times[name]) for name in kernels)
    print(f"{m:3d} rows: before {b * 1e3:6.2f} ms, chunked {c * 1e3:6.2f} ms ({c / b:.3f}), the same bits", flush=True)
