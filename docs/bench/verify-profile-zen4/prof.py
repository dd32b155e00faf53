"""Profile verify(1) and verify(N) of the embedded target on this CPU, ops grouped."""

import sys, torch
from torch.profiler import profile, ProfilerActivity
from talon.models.registry import ModelRegistry
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids

torch.set_num_threads(2)
reg = ModelRegistry()
target = reg.get("embedded") if hasattr(reg, "get") else None
ids = context_ids(target)
sizes = [int(s) for s in sys.argv[1].split(",")]
p = _Pieces(target, NoDrafter(), ids, sizes, ())
for s in sizes:
    for _ in range(3):
        p.verify(s)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(5):
            p.verify(s)
    print(f"===== verify({s})")
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))
p.close()
