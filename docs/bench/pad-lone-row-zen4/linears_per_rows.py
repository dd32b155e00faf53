"""Microbenchmark: one pass over the embedded model's 210 linear shapes (random float32 weights) per row count,
MKL against the packed oneDNN kernel with the given batch hints.  python linears_per_rows.py 64,8,16,1"""

import torch, time, sys
from torch import nn

torch.set_num_threads(2)
torch.manual_seed(0)
shapes = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)]
W = [torch.randn(o, i) * 0.02 for _ in range(30) for (i, o) in shapes]
hints = [int(h) for h in sys.argv[1].split(",")] if len(sys.argv) > 1 else [64]
packed = {h: [torch.ops.mkldnn._reorder_linear_weight(w, h) for w in W] for h in hints}
rows_list = list(range(1, 17)) + [20, 24, 32]


def run_mkl(xs):
    for w, x in zip(W, xs):
        nn.functional.linear(x, w)


def run_p(xs, P):
    for w, x in zip(P, xs):
        torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "")


res = {}
with torch.inference_mode():
    for rep in range(5):
        for r in rows_list:
            xs = [torch.randn(r, w.shape[1]) for w in W]
            fns = {"mkl": lambda: run_mkl(xs)}
            for h in hints:
                fns[f"p{h}"] = lambda P=packed[h]: run_p(xs, P)
            for k, f in fns.items():
                f()
                ts = []
                for _ in range(3):
                    t = time.perf_counter()
                    f()
                    ts.append(time.perf_counter() - t)
                res.setdefault((r, k), []).append(min(ts))
keys = ["mkl"] + [f"p{h}" for h in hints]
print("rows " + " ".join(f"{k:>8}" for k in keys))
import statistics

for r in rows_list:
    print(f"{r:4d} " + " ".join(f"{statistics.median(res[(r, k)]) * 1e3:8.2f}" for k in keys))
