"""verify(s) split into sections by wall clock (perf_counter wrappers around the C++ calls, the forward, the LM head's scores, picks and node probabilities; no profiler), medians of 20, on the cost suite's trees.

    PYTHONPATH=. python docs/bench/xeon-spr-r63/verify_sections.py
"""
import statistics, sys, time, torch, collections
from talon.models import stream_gemm, row_ops, lm_head
from talon.runtime import kv_cache
T = collections.defaultdict(float)
def wrap(obj, name, key):
    f = getattr(obj, name)
    def g(*a, **k):
        t0 = time.perf_counter()
        try:
            return f(*a, **k)
        finally:
            T[key] += time.perf_counter() - t0
    setattr(obj, name, g)
wrap(stream_gemm.extension(), "linear", "products")
for n in ("rms_norm", "rotary", "silu_mul"):
    if hasattr(row_ops.extension(), n): wrap(row_ops.extension(), n, "glue C++")
wrap(row_ops.extension(), "grouped_attention", "attention C++")
wrap(kv_cache.CachedLM, "forward_nodes", "forward_nodes")
wrap(kv_cache.CachedLM, "scores", "head scores")
for cls in (lm_head.FullScores, lm_head.ScreenedScores):
    wrap(cls, "pick", "pick"); wrap(cls, "token_probs", "token_probs")
from talon.models.registry import ModelRegistry
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
torch.set_num_threads(2)
target = ModelRegistry().get("embedded")
print("screen:", target.screen is not None)
ids = context_ids(target)
sizes = [1, 8, 16, 32]
p = _Pieces(target, NoDrafter(), ids, sizes, ())
for s in sizes:
    for _ in range(3): p.verify(s)
    runs = collections.defaultdict(list)
    for r in range(20):
        T.clear()
        t0 = time.perf_counter(); p.verify(s); T["whole"] = time.perf_counter() - t0
        for k, v in T.items(): runs[k].append(v)
    print(f"verify({s}): " + ", ".join(f"{k} {statistics.median(v)*1e3:.2f}" for k, v in runs.items()), flush=True)
