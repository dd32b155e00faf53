"""Where the host's Python time goes in a TALON step on a GPU: cProfile over TALON auto (the GPU
default: the shipped head, K=10, mu=0.03, depth 8, cap 128) on five of the head suite's prompts, 64
tokens, greedy, after one warm-up run; prints the steps and drafter calls, then the functions by own
time and by cumulative time.  cProfile slows Python code, so the shares, not the seconds, are the
finding.  From the repository root (docs/benchmarks.md, "A few-row Triton kernel
for a tree's rows, tried; auto against fixed N again on an H200 and an H100"):

    PYTHONPATH=. python docs/bench/gpu-host-python-h100/py_profile.py"""

import cProfile
import pstats

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry

registry = ModelRegistry()
target = registry.get("embedded")
runner = MethodRunner(target, registry, "head")
items, _ = load_prompts(next(e for e in SUITES["head"].experiments if e.name == "auto_vs_fixed"))
method = "talon+auto"
cfg = tree_config(method, {"topk": 10, "mu": 0.03, "depth": 8, "cap": 128})
curve = runner.curve(method, cfg)
drafter = runner.drafter(method)
prompts = [encode_prompt(target, item["prompt"]) for item in items[:5]]
decode = DecodeConfig(max_new_tokens=64)
timed_generation(target, drafter, cfg, decode, prompts[0], curve)
steps = calls = 0
seconds = 0.0
profiler = cProfile.Profile()
profiler.enable()
for ids in prompts:
    trace, wall = timed_generation(target, drafter, cfg, decode, ids, curve)
    steps += len(trace.steps)
    calls += sum(len(s.call_widths) for s in trace.steps)
    seconds += wall
profiler.disable()
print(
    f"{steps} steps, {calls} drafter calls, {seconds:.2f} s under the profiler ({1e3 * seconds / steps:.2f} ms a step)"
)
stats = pstats.Stats(profiler)
stats.sort_stats("tottime").print_stats(30)
stats.sort_stats("cumtime").print_stats(50)
