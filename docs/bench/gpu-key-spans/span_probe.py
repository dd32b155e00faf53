"""What a static forward costs by the keys it reads: the embedded target's and the shipped head's CUDA
graph replays (median of nine, timed at capture: ``StaticRunner.replay_seconds``) for every query bucket
at every key span of a 1,024-row and a 2,048-row runner, and how long capturing them took.  On a GPU,
from the repository root (docs/benchmarks.md, "Graphs per key span"):

    PYTHONPATH=. python docs/bench/gpu-key-spans/span_probe.py

On a CPU nothing is captured (``TALON_CUDA_GRAPHS=eager`` runs the static path without graphs), so it
only checks that the runners build."""

import torch

from talon.drafters.factory import make_drafter
from talon.drafters.head import HeadCache
from talon.models.registry import ModelRegistry
from talon.runtime.graphs import BUCKETS
from talon.runtime.kv_cache import CachedLM

registry = ModelRegistry()
target = registry.get("embedded")
head = make_drafter("head", target, registry).head
print(f"{target.name} on {target.device}, {target.dtype}; query buckets {BUCKETS}")
for name, make in (
    ("target", lambda rows: CachedLM(target, (), rows)),
    ("head", lambda rows: HeadCache(head, target, rows)),
):
    for capacity in (1024, 2048):
        with torch.inference_mode():
            cache = make(capacity - BUCKETS[-1])  # the runner of exactly this capacity
        runner = cache.runner
        if runner is None or not runner.replay_seconds:
            print(f"{name} capacity {capacity}: nothing captured (TALON_CUDA_GRAPHS off or no GPU)")
            continue
        print(
            f"{name} capacity {capacity}: {len(runner.graphs)} graphs, "
            f"captured and timed in {runner.capture_seconds:.2f} s"
        )
        for span in runner.spans:
            times = {
                size: round(runner.replay_seconds[size, span] * 1e3, 3)
                for size in BUCKETS
                if (size, span) in runner.replay_seconds
            }
            print(f"  span {span:5d}: replay ms by rows {times}")
        cache.release()
