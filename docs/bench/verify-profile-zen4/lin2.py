import torch, time, statistics
from torch import nn

torch.set_num_threads(2)
torch.manual_seed(0)
shapes = [(576, 576), (576, 192), (576, 192), (576, 576), (576, 1536), (576, 1536), (1536, 576)]
W = [torch.randn(o, i) * 0.02 for _ in range(30) for (i, o) in shapes]
WT = [w.t().contiguous() for w in W]
P = {h: [torch.ops.mkldnn._reorder_linear_weight(w, h) for w in W] for h in (1, 8, 16, 32)}


def bench(f):
    f()
    ts = []
    for _ in range(5):
        t = time.perf_counter()
        f()
        ts.append(time.perf_counter() - t)
    return min(ts) * 1e3


with torch.inference_mode():
    res = {}
    for rep in range(3):
        for r in (1, 4, 8, 16, 32):
            xs = [torch.randn(r, w.shape[1]) for w in W]
            fns = {
                "mklNT": lambda: [nn.functional.linear(x, w) for w, x in zip(W, xs)],
                "mklNN": lambda: [torch.mm(x, w) for w, x in zip(WT, xs)],
            }
            for h in P:
                fns[f"p{h}"] = lambda Q=P[h]: [
                    torch.ops.mkldnn._linear_pointwise(x, w, None, "none", [], "") for w, x in zip(Q, xs)
                ]
            for k, f in fns.items():
                res.setdefault((r, k), []).append(bench(f))
    keys = ["mklNT", "mklNN"] + [f"p{h}" for h in P]
    print("rows", keys)
    for r in (1, 4, 8, 16, 32):
        print(r, [round(statistics.median(res[(r, k)]), 2) for k in keys])
