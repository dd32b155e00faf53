"""Where verify(32) goes beyond verify(1): torch.profiler over 10 verifications of each (the cost suite's trees),
TALON's C++ calls wrapped in record_function so they show; self time per verification, by operation.

    PYTHONPATH=. python docs/bench/xeon-spr-r62/verify_profile.py
"""

import sys, torch, time, statistics
from torch.profiler import profile, ProfilerActivity, record_function
from talon.models import stream_gemm, row_ops
def wrap(mod, name):
    f = getattr(mod, name)
    def g(*a, **k):
        with record_function("ext::" + name):
            return f(*a, **k)
    setattr(mod, name, g)
for n in ("linear",): wrap(stream_gemm.extension(), n)
for n in ("rms_norm", "rotary", "grouped_attention", "row_argmax", "row_topk"): wrap(row_ops.extension(), n)
from talon.models.registry import ModelRegistry
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
torch.set_num_threads(2)
target = ModelRegistry().get("embedded")
print("LM head screened:", target.screen is not None)
ids = context_ids(target)
p = _Pieces(target, NoDrafter(), ids, [1, 16, 32], ())
res = {}
for s in (1, 32):
    for _ in range(3): p.verify(s)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(10): p.verify(s)
    res[s] = {e.key: (e.self_cpu_time_total / 10, e.count / 10) for e in prof.key_averages()}
keys = sorted(set(res[1]) | set(res[32]), key=lambda k: -(res[32].get(k, (0, 0))[0] - res[1].get(k, (0, 0))[0]))
tot1 = sum(v[0] for v in res[1].values()); tot32 = sum(v[0] for v in res[32].values())
print(f"total self us: 1 row {tot1:.0f}, 32 {tot32:.0f}")
for k in keys[:25]:
    a, b = res[1].get(k, (0, 0)), res[32].get(k, (0, 0))
    print(f"{k:40s} 1: {a[0]:8.0f} us ({a[1]:4.0f})   32: {b[0]:8.0f} us ({b[1]:4.0f})   +{b[0]-a[0]:7.0f}")
