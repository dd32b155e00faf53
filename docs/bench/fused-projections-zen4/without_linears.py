# An experiment before the change (docs/bench/fused-projections-zen4/results.txt).
"""How much of verify(n) is not the linears: linears replaced by returning a cached zero tensor."""
import random, statistics, sys, types
import torch
from talon.models.registry import ModelRegistry
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.cpu_linear import PackedLinear
torch.set_num_threads(2)
target = ModelRegistry().get("embedded"); model = target.model
ids = context_ids(target)
sizes = [1, 4, 8, 16]
p = _Pieces(target, NoDrafter(), ids, sizes, ())
lins = [m for m in model.modules() if isinstance(m, PackedLinear)]
orig = {id(m): m.forward for m in lins}
def zero_fwd(self, x):
    return torch.zeros(*x.shape[:-1], self.out_features, dtype=x.dtype) + 0.01
def setv(v):
    for m in lins:
        m.forward = types.MethodType(zero_fwd, m) if v == "Z" else orig[id(m)]
times = {(v, s): [] for v in "AZ" for s in sizes}
for r in range(20):
    order = [(v, s) for v in "AZ" for s in sizes]; random.shuffle(order)
    for v, s in order:
        setv(v)
        try:
            p.verify(s); times[(v, s)].append(p.verify(s))
        except Exception as e:
            print("err", v, s, e); raise
setv("A")
for s in sizes:
    print(s, " ".join(f"{v} {statistics.median(times[(v,s)])*1e3:.2f}" for v in "AZ"))
