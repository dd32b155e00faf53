"""Inductor's CPU GEMM template (``torch.compile`` with freezing, ``max_autotune`` and the ``CPP`` GEMM
backend) over the embedded model's float32 linear shapes (NL layers of 576 -> 960, 576 -> 576,
576 -> 3072, 1536 -> 576; random weights), against PyTorch's linear and MKL's packed sgemm, at ROWS rows.
From the repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r35/inductor_gemm.py 16 30"""

import time, sys, torch
import torch.nn as nn
import torch._inductor.config as ic
from talon.models.cpu_linear import fastest_seconds
torch.manual_seed(0)
ROWS = int(sys.argv[1]) if len(sys.argv) > 1 else 16
NL = int(sys.argv[2]) if len(sys.argv) > 2 else 30
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
class M(nn.Module):
    def __init__(self):
        super().__init__()
        self.lins = nn.ModuleList(nn.Linear(i, o, bias=False) for _ in range(NL) for (o, i) in SHAPES)
        for l in self.lins: nn.init.normal_(l.weight, std=0.05)
    def forward(self, xs):
        return [l(x) for l, x in zip(self.lins, xs)]
m = M().eval()
xs = [torch.randn(ROWS, l.weight.shape[1]) for l in m.lins]
mkl = [torch.ops.mkl._mkl_reorder_linear_weight(l.weight.detach(), 64) for l in m.lins]
with torch.no_grad():
    ref = m(xs)
    t_plain = fastest_seconds(lambda: m(xs))
    t_mkl = fastest_seconds(lambda: [torch.ops.mkl._mkl_linear(x, p, l.weight, None, ROWS) for x, p, l in zip(xs, mkl, m.lins)])
    print(f"rows {ROWS}: F.linear {t_plain*1e3:.2f} ms, MKL packed {t_mkl*1e3:.2f} ms", flush=True)
    ic.freezing = True
    ic.max_autotune = True
    ic.max_autotune_gemm_backends = "CPP"
    t0 = time.time()
    c = torch.compile(m, dynamic=False)
    out = c(xs)
    print(f"compile {time.time()-t0:.0f} s", flush=True)
    err = max((a - b).abs().max().item() for a, b in zip(out, ref))
    t_c = fastest_seconds(lambda: c(xs))
    print(f"inductor CPP gemm {t_c*1e3:.2f} ms, max abs diff {err:.2e}", flush=True)
