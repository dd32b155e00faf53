"""A lone row vs four rows vs a lone row padded to 4 (and 2) rows, the padding included; 40 interleaved rounds."""

import torch, time, statistics
from torch import nn

torch.set_num_threads(2)
shapes = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)]
W = [torch.randn(o, i) * 0.02 for _ in range(30) for (i, o) in shapes]
P = [torch.ops.mkldnn._reorder_linear_weight(w, 64) for w in W]


def run(xs):
    for w, x in zip(P, xs):
        torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")


def runpad(xs, k):
    for w, x in zip(P, xs):
        p = torch.cat([x, x.new_zeros(k - 1, x.shape[1])])
        torch.ops.mkldnn._linear_pointwise(p, w, None, "none", [], "")[:1]


res = {}
with torch.inference_mode():
    x1 = [torch.randn(1, w.shape[1]) for w in W]
    x4 = [torch.randn(4, w.shape[1]) for w in W]
    fns = {
        "1row": lambda: run(x1),
        "4row": lambda: run(x4),
        "pad4": lambda: runpad(x1, 4),
        "pad2": lambda: runpad(x1, 2),
    }
    for rep in range(40):
        for k, f in fns.items():
            t = time.perf_counter()
            f()
            res.setdefault(k, []).append(time.perf_counter() - t)
for k, v in res.items():
    print(k, f"median {statistics.median(v[5:]) * 1e3:.2f} min {min(v) * 1e3:.2f}")
