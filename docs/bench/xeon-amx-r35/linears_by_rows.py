"""The embedded model's float32 linears as its fused forward runs them (30 layers of query/key/value
576 -> 960, output 576 -> 576, gate/up 576 -> 3072, down 1536 -> 576; random weights of those shapes),
one pass over all 120 at each row count, four ways: PyTorch's own linear (MKL's sgemm), oneDNN's packed
kernel, MKL's packed sgemm from one copy packed for 64 rows, and TALON's streaming kernel
(``talon.models.stream_gemm``).  Least of 15 passes (``fastest_seconds``), milliseconds.  From the
repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r35/linears_by_rows.py"""

import torch
import torch.nn.functional as F

from talon.models import stream_gemm
from talon.models.cpu_linear import fastest_seconds

torch.manual_seed(0)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
weights = [torch.randn(o, i) * 0.05 for _ in range(30) for (o, i) in SHAPES]
onednn = [torch.ops.mkldnn._reorder_linear_weight(w, 64) for w in weights]
mkl = [torch.ops.mkl._mkl_reorder_linear_weight(w, 64) for w in weights]
stream = [stream_gemm.pack(w) for w in weights]

for rows in (1, 2, 3, 4, 5, 6, 8, 12, 16, 20, 24, 32, 48, 64, 128):
    xs = [torch.randn(rows, w.shape[1]) for w in weights]
    times = {
        "F.linear": fastest_seconds(lambda xs=xs: [F.linear(x, w) for x, w in zip(xs, weights)]),
        "oneDNN packed": fastest_seconds(
            lambda xs=xs: [torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "") for x, p in zip(xs, onednn)]
        ),
        "MKL packed": fastest_seconds(
            lambda xs=xs, n=rows: [torch.ops.mkl._mkl_linear(x, p, w, None, n) for x, p, w in zip(xs, mkl, weights)]
        ),
        "stream": fastest_seconds(
            lambda xs=xs: [stream_gemm.linear(x, p, w.shape[0]) for x, p, w in zip(xs, stream, weights)]
        ),
    }
    print(f"{rows:4d} rows: " + ", ".join(f"{k} {v * 1e3:6.2f} ms" for k, v in times.items()), flush=True)
