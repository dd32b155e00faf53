"""PyTorch's argmax and top-k against ``talon.models.row_top``'s C++ on random float32 rows of the embedded
model's vocabulary (49,152), two threads, median of 200 calls after 20, microseconds.  From the
repository root, nothing else running:

    PYTHONPATH=. python docs/bench/xeon-emr-r54/picks_micro.py"""

import statistics
import time

import torch

from talon.models import row_ops

torch.set_num_threads(2)
ext = row_ops.extension()


def median_us(f, calls: int = 200) -> float:
    for _ in range(20):
        f()
    times = []
    for _ in range(calls):
        start = time.perf_counter()
        f()
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1e6


print("rows  k | argmax torch | argmax C++ | top-k torch | top-k C++")
for rows, k in ((1, 16), (4, 16), (16, 16), (32, 16), (6, 6)):
    x = torch.randn(rows, 49152)
    assert torch.equal(ext.row_argmax(x), x.argmax(1)) and torch.equal(ext.row_topk(x, k)[0], x.topk(k, 1).values)
    cells = [median_us(lambda: x.argmax(1)), median_us(lambda: ext.row_argmax(x))]
    cells += [median_us(lambda: x.topk(k, 1)), median_us(lambda: ext.row_topk(x, k))]
    print(f"{rows:4d} {k:2d} | " + " | ".join(f"{c:8.0f}" for c in cells))
