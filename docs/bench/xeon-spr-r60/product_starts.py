"""What a product's start costs TALON's kernel: 30 products of one shape (3,072 x 576, 7 MB each) against one
product of the same bytes (92,160 x 576), then the 30 as slices of that one tensor (one after another in
memory), at 1, 16 and 32 rows; medians of 10 rounds.  Threads from the command line; run it with and
without ``THP_MEM_ALLOC_ENABLE=1`` (PyTorch's huge pages for every large allocation).

    PYTHONPATH=. python docs/bench/xeon-spr-r60/product_starts.py THREADS
"""

import statistics
import sys
import time

import torch

from talon.models import stream_gemm

ext = stream_gemm.extension()
torch.manual_seed(0)

torch.set_num_threads(int(sys.argv[1]))
n_layers = 30
small = [stream_gemm.pack(torch.randn(3072, 576) * 0.02) for _ in range(n_layers)]
big = stream_gemm.pack(torch.randn(3072 * n_layers, 576) * 0.02)
for m in (1, 16, 32):
    x = torch.randn(m, 576)
    ts, tb = [], []
    for _ in range(12):
        t = time.perf_counter()
        for p in small:
            ext.linear(x, p, 3072, None)
        ts.append(time.perf_counter() - t)
        t = time.perf_counter()
        ext.linear(x, big, 3072 * n_layers, None)
        tb.append(time.perf_counter() - t)
    a, b = statistics.median(ts[2:]), statistics.median(tb[2:])
    print(f"{m} rows: 30 products {a * 1e3:.2f} ms, one product of the same bytes {b * 1e3:.2f} ms ({a / b:.3f})")
# the same 30 products, their packed weights slices of the big tensor (contiguous, one allocation)
slices = [big[i * 192 : (i + 1) * 192] for i in range(n_layers)]
for m in (1, 16, 32):
    x = torch.randn(m, 576)
    ts, tb = [], []
    for _ in range(12):
        t = time.perf_counter()
        for p in slices:
            ext.linear(x, p, 3072, None)
        ts.append(time.perf_counter() - t)
        t = time.perf_counter()
        ext.linear(x, big, 3072 * n_layers, None)
        tb.append(time.perf_counter() - t)
    a, b = statistics.median(ts[2:]), statistics.median(tb[2:])
    print(f"{m} rows: 30 products on slices of one tensor {a * 1e3:.2f} ms, one product {b * 1e3:.2f} ms ({a / b:.3f})")
