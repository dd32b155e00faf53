"""cuBLAS against cuBLASLt (a zero bias: ``talon.models.gpu_linear``) for one float32 linear of each of
the embedded target's shapes (random weights), per row count of the static buckets: each choice's
per-call time in a CUDA graph of 20 calls (median of five replays), and the row counts ``auto`` mode
would give cuBLASLt.  Needs only torch.  From the repository root, on a GPU:

    PYTHONPATH=. python docs/bench/gpu-skinny-linear/lt_probe.py"""

import torch
from torch import nn

from talon.models.gpu_linear import RowLinear, choose_rows

SHAPES = {"q,o": (576, 576), "k,v": (576, 192), "gate,up": (576, 1536), "down": (1536, 576), "lm head": (576, 49152)}

print(torch.cuda.get_device_name(), torch.__version__, flush=True)
torch.manual_seed(0)
for name, (k, n) in SHAPES.items():
    layer = RowLinear(nn.Linear(k, n, bias=False, device="cuda"))
    chosen, times = choose_rows(layer)
    cells = "  ".join(f"{rows}: {1e6 * a:5.1f}/{1e6 * b:5.1f}" for rows, (a, b) in times.items())
    print(f"{name:8s} [{k}->{n}] us cuBLAS/cuBLASLt by rows  {cells}  -> cuBLASLt at {chosen}", flush=True)
