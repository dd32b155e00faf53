"""How a static forward's time grows with the fixed KV buffer it attends over: the embedded target's CUDA
graph replays (median of nine, timed at capture: ``StaticRunner.replay_seconds``) for every query bucket
at every runner capacity.  If a 1-row forward costs much more at 2,048 rows than at 1,024, attention over
the whole buffer is what a step pays for (docs/benchmarks.md, "A layer's host work on the GPU"), and
graphs per key-length bucket are worth building.  On a GPU, from the repository root:

    PYTHONPATH=. python docs/bench/gpu-host-work-h200/capacity_probe.py

On a CPU nothing is captured (``TALON_CUDA_GRAPHS=eager`` runs the static path without graphs), so it
only checks that the runners build."""

import torch

from talon.models.registry import ModelRegistry
from talon.runtime.graphs import BUCKETS, CAPACITIES
from talon.runtime.kv_cache import CachedLM

target = ModelRegistry().get("embedded")
print(f"{target.name} on {target.device}, {target.dtype}; query buckets {BUCKETS}")
for capacity in CAPACITIES:
    with torch.inference_mode():
        cached = CachedLM(target, (), rows=capacity - BUCKETS[-1])  # the runner of exactly this capacity
    runner = cached.runner
    if runner is None:
        print(f"capacity {capacity}: no static runner here (TALON_CUDA_GRAPHS off or no GPU)")
        continue
    times = {size: round(seconds * 1e3, 3) for size, seconds in sorted(runner.replay_seconds.items())}
    print(f"capacity {capacity}: KV buffer {runner.kv.capacity} rows, replay ms by rows {times or 'not captured'}")
    cached.release()
