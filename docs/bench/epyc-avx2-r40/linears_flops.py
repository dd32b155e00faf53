"""The model's products (SmolLM2-135M: 30 layers of fused q/k/v 960x576, o 576x576, fused gate/up
3072x576, down 576x1536, and the LM head 49152x576; random weights) through TALON's kernel at 1-32 rows,
least of 7 sweeps: milliseconds, weight bytes read per second, arithmetic per second
(``PYTHONPATH=. python docs/bench/epyc-avx2-r40/linears_flops.py``)."""
import time

import torch

from talon.models import stream_gemm as sg

torch.manual_seed(0)
shapes = [(960, 576), (576, 576), (3072, 576), (576, 1536)] * 30 + [(49152, 576)]
ws = [torch.randn(o, i) for o, i in shapes]
ps = [sg.pack(w) for w in ws]
nbytes = sum(w.numel() * 4 for w in ws)
flops = sum(w.numel() * 2 for w in ws)
for rows in (1, 2, 4, 6, 8, 12, 16, 24, 32):
    xs = {i: torch.randn(rows, i) for i in (576, 1536)}
    best = 1e9
    for _ in range(7):
        t = time.perf_counter()
        for (o, i), p in zip(shapes, ps):
            sg.linear(xs[i], p, o)
        best = min(best, time.perf_counter() - t)
    print(f"rows {rows:3d} {best * 1e3:7.1f} ms  {nbytes / best / 1e9:5.1f} GB/s  {rows * flops / best / 1e9:6.1f} GFLOP/s", flush=True)
