"""Where a TALON step's host time goes on this device: torch.profiler over TALON N=24 (the shipped head,
K=10, mu=0.03) on three of the head suite's prompts, after one warm-up run; prints the operations by
host time and how many ran per step.  Run from the repository root:

    PYTHONPATH=. python docs/bench/gpu-host-work-h200/host_profile.py [SORT]

SORT: the profiler's sort key (default ``self_cpu_time_total``; ``self_cuda_time_total`` for the device's
kernels, ``TALON_CUDA_GRAPHS=0`` to see them by operation rather than inside graph replays)."""

import sys

import torch
from torch.profiler import ProfilerActivity, profile

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry

registry = ModelRegistry()
target = registry.get("embedded")
runner = MethodRunner(target, registry, "head")
items, _ = load_prompts(next(e for e in SUITES["head"].experiments if e.name == "auto_vs_fixed"))
cfg = tree_config("talon", {"topk": 10, "mu": 0.03, "depth": 8, "budget": 24})
prompts = [encode_prompt(target, item["prompt"]) for item in items[:3]]
timed_generation(target, runner.drafter("talon"), cfg, DecodeConfig(max_new_tokens=64), prompts[0])
activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
steps = 0
with profile(activities=activities) as prof:
    for ids in prompts:
        trace, _ = timed_generation(target, runner.drafter("talon"), cfg, DecodeConfig(max_new_tokens=64), ids)
        steps += len(trace.steps)
print(f"{steps} steps")
sort = sys.argv[1] if len(sys.argv) > 1 else "self_cpu_time_total"
table = prof.key_averages().table(sort_by=sort, row_limit=40, max_name_column_width=70)
print(table)
events = [e for e in prof.key_averages() if e.key.startswith(("aten::", "cuda"))]
print(f"aten/cuda calls per step: {sum(e.count for e in events) / steps:.0f}")
