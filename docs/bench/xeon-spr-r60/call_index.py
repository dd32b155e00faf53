"""A drafter call's wall clock inside real runs, by its place in the step: TALON auto at the CPU defaults on
the first PROMPTS prompts of the headline suite (greedy, 64 tokens), every ``begin_step`` (the step's first
call) and ``propose`` (its second call on) timed with its answer read back; medians by the call's place
(second, third, fourth on) and frontier width, beside the cost curve's prices.

    PYTHONPATH=. python docs/bench/xeon-spr-r60/call_index.py [PROMPTS]
"""

import collections
import statistics
import sys
import time

from talon.bench.suites import get_suite, load_prompts
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry

PROMPTS = int(sys.argv[1]) if len(sys.argv) > 1 else 16
prompts, _ = load_prompts(get_suite("headline").experiments[0])
registry = ModelRegistry()
target = registry.get("embedded")
cfg = TreeConfig(method="talon", budget=24, topk=6, mu=0.1, depth=5, gamma=4, auto=True)
times = collections.defaultdict(list)  # (place in the step, frontier width) -> seconds
firsts = []


def clocked(drafter):
    place = {"call": 1}
    begin, propose = drafter.begin_step, drafter.propose

    def timed_begin(*args, **kwargs):
        t0 = time.perf_counter()
        out = begin(*args, **kwargs)
        out.logprobs.max().item()
        firsts.append(time.perf_counter() - t0)
        place["call"] = 1
        return out

    def timed_propose(tree, frontier):
        t0 = time.perf_counter()
        out = propose(tree, frontier)
        out.logprobs.max().item()
        place["call"] += 1
        times[min(place["call"], 4), min(len(frontier), 8)].append(time.perf_counter() - t0)
        return out

    drafter.begin_step, drafter.propose = timed_begin, timed_propose
    return drafter


curve = None
for item in prompts[:PROMPTS]:
    drafter = clocked(drafter_for("talon", "head", target, registry))
    curve = curve or curve_for_run(target, drafter, cfg)
    run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=64), item["prompt"], texts=False, cost_curve=curve)
ms = lambda points: ", ".join(f"{w}: {s * 1e3:.2f}" for w, s in points)  # noqa: E731
print(f"curve: plain step {curve.plain * 1e3:.2f} ms; first call {curve.root * 1e3:.2f} ms")
print(f"curve: second call by width (ms) {ms(curve.call)}")
print(f"curve: later call by width (ms) {ms(curve.later)}")
print(f"in the runs: first call median {statistics.median(firsts) * 1e3:.2f} ms ({len(firsts)} calls)")
names = {2: "second", 3: "third", 4: "fourth on"}
for (place, width), seconds in sorted(times.items()):
    wide = f"{width}" if width < 8 else "8+"
    median = statistics.median(seconds) * 1e3
    print(f"in the runs: {names[place]} call, width {wide}: median {median:.2f} ms ({len(seconds)})")
