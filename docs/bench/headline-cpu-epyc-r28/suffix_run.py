"""Does a longer copy run tell which of prompt lookup's three-token matches are accepted?  The headline's
chat, code, math, summarisation, extraction, qa and lists prompts decoded with hybrid auto on the saved
hybrid curve; each step's retrieval drafts at depths 1-2 that matched three tokens, grouped by the
committed text's longest suffix that also occurs earlier (docs/benchmarks.md, run 28).  From the
repository root:

    PYTHONPATH=. python docs/bench/headline-cpu-epyc-r28/suffix_run.py"""

from collections import defaultdict

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig, device_default_tree
from talon.drafters.calibration import Calibration, reached_nodes
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry


def suffix_run(seq, cap=32):
    """Longest L <= cap such that seq[-L:] occurs earlier in seq (ending before the last position)."""
    best = 0
    n = len(seq)
    for L in range(1, min(cap, n - 1) + 1):
        tail = seq[n - L :]
        found = any(seq[i : i + L] == tail for i in range(0, n - L))
        if not found:
            break
        best = L
    return best


registry = ModelRegistry()
target = registry.get("embedded")
runner = MethodRunner(target, registry, "head")
items, _ = load_prompts(SUITES["headline"].experiments[0])
items = [i for i in items if i["category"] in ("summarisation", "extraction", "qa", "chat", "code", "lists", "math")]
default = device_default_tree(False)[0]
method = "hybrid+auto"
cfg = tree_config(method, {k: getattr(default, k) for k in ("topk", "mu", "depth", "gamma")})
curve = runner.curve(method, cfg)
drafter = runner.drafter(method)
agg = defaultdict(lambda: [0, 0.0, 0])
for item in items:
    ids = encode_prompt(target, item["prompt"])
    trace, _ = timed_generation(target, drafter, cfg, DecodeConfig(max_new_tokens=64), ids, curve)
    cal = Calibration(drafter.calibration_prior)
    seq = list(ids)
    for step in trace.steps:
        given = cal.given_parents(step.tree)
        t = step.tree
        L = suffix_run(seq)
        for node, accepted in reached_nodes(t, step):
            if t.source[node] != "retrieval" or t.depth[node] > 2 or t.match[node] < 3:
                continue
            b = "<3" if L < 3 else "3-5" if L < 6 else "6-11" if L < 12 else "12+"
            a = agg[b]
            a[0] += 1
            a[1] += given[node]
            a[2] += accepted
        cal.observe(t, step)
        seq += [t.token[n] for n in step.accepted_path[1:]] + [step.bonus_token]
for b, (r, g, a) in sorted(agg.items()):
    print(f"suffix run {b}: reached {r} given {g:.1f} accepted {a} ({a / r:.2f})")
