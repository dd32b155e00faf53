"""transformers' sdpa (repeat_kv copies) against talon.models.cpu_attention (enable_gqa) on the same loaded
model: 40 rounds, the two in a shuffled order each round, a plain step and verify(1/8/16/32) of the cost
suite's trees; median and quartiles in ms.

    PYTHONPATH=. python docs/bench/verify-ab-cpu-epyc-zen4/attention_ab.py

Run at 08a6d57, whose measured trees still had log-probability -1 everywhere; output in attention_ab.txt.
"""

import random
import statistics

from talon.drafters.factory import make_drafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.cpu_attention import GQA_ATTENTION, use_gqa_attention
from talon.models.registry import ModelRegistry

registry = ModelRegistry()
target = registry.get("embedded")
pieces = _Pieces(target, make_drafter("head", target, registry), context_ids(target), (1, 8, 16, 32), (1,))
use_gqa_attention(target.model)
for _ in range(3):
    pieces.plain_step()
    pieces.verify(16)
timings: dict[tuple[str, str], list[float]] = {}
modes = ["sdpa", GQA_ATTENTION]
jobs = [("plain", pieces.plain_step)] + [(f"v{n}", lambda n=n: pieces.verify(n)) for n in (1, 8, 16, 32)]
for _ in range(40):
    random.shuffle(modes)
    for mode in modes:
        target.model.set_attn_implementation(mode)
        for name, job in jobs:
            timings.setdefault((mode, name), []).append(job() * 1e3)
for key, ms in sorted(timings.items()):
    q1, _, q3 = statistics.quantiles(ms, n=4)
    print(key, f"median {statistics.median(ms):.2f}  q1 {q1:.2f} q3 {q3:.2f}")
pieces.close()
