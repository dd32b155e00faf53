"""float32 against exact bfloat16 (the row-invariant forward where the CPU has AVX512-BF16), side by side in
one process: plain decoding and TALON auto (the CPU default: the shipped head, K=6, mu=0.1, depth 5,
cap 128, each dtype on its own cost curve) on the head suite's 30 prompts (64 tokens, greedy), the order
of the two dtypes alternating per prompt.  Each dtype's TALON is checked against that dtype's plain
decoding (bfloat16 decodes other text than float32: a precision change, not a loss).  From the
repository root, nothing else running:

    PYTHONPATH=. python docs/bench/xeon-emr-r52/dtype_ab.py [PROMPTS]"""

import math
import statistics
import sys

import torch

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry

METHOD = "talon+auto"
cfg = tree_config(METHOD, {"topk": 6, "mu": 0.1, "depth": 5, "cap": 128})
sides = {}
for dtype in (torch.float32, torch.bfloat16):
    registry = ModelRegistry(dtype=dtype)
    target = registry.get("embedded")
    runner = MethodRunner(target, registry, "head")
    curve = curve_for_run(target, runner.drafter(METHOD), cfg)
    name = str(dtype).removeprefix("torch.")
    sides[name] = (target, runner, curve)
    print(
        f"{name}: plain step {curve.plain * 1e3:.1f} ms, verify(4, 16, 32) "
        + " ".join(f"{curve.verify_ratio(n):.2f}" for n in (4, 16, 32)),
        flush=True,
    )
items, _ = load_prompts(next(e for e in SUITES["head"].experiments if e.name == "auto_vs_fixed"))
items = items[: int(sys.argv[1])] if len(sys.argv) > 1 else items
decode = DecodeConfig(max_new_tokens=64)
runs = []  # (dtype, method, prompt, tokens, seconds, equal to that dtype's ar, draft nodes a step)
for i, item in enumerate(items):
    for name in list(sides) if i % 2 == 0 else list(sides)[::-1]:
        target, runner, curve = sides[name]
        ids = encode_prompt(target, item["prompt"])
        ar, ar_s = timed_generation(target, None, tree_config("ar", {}), decode, ids, None)
        tree, tree_s = timed_generation(target, runner.drafter(METHOD), cfg, decode, ids, curve)
        nodes = statistics.mean(len(s.tree) - 1 for s in tree.steps)
        runs.append((name, "ar", item["id"], len(ar.output_ids), ar_s, True, 0.0))
        runs.append((name, METHOD, item["id"], len(tree.output_ids), tree_s, tree.output_ids == ar.output_ids, nodes))
for name in sides:
    for method in ("ar", METHOD):
        mine = [r for r in runs if r[0] == name and r[1] == method]
        tps = sum(r[3] for r in mine) / sum(r[4] for r in mine)
        print(
            f"{name:>8} {method:>10}: {tps:6.2f} tokens/s, draft nodes a step "
            f"{statistics.mean(r[6] for r in mine):.2f}, equal to its ar {sum(r[5] for r in mine)}/{len(mine)}"
        )


def per_prompt(a: tuple[str, str], b: tuple[str, str]) -> str:
    """Per prompt, the seconds of ``a`` over those of ``b`` (> 1: ``b`` faster), geometric mean."""
    sa = {r[2]: r[4] / r[3] for r in runs if r[:2] == a}  # seconds a token: the dtypes' texts differ
    sb = {r[2]: r[4] / r[3] for r in runs if r[:2] == b}
    logs = [math.log(sa[p] / sb[p]) for p in sa]
    se = statistics.stdev(logs) / math.sqrt(len(logs))
    return (
        f"{b[0]} {b[1]} over {a[0]} {a[1]}: {math.exp(statistics.mean(logs)):.3f} per token, per-prompt "
        f"geometric mean (one s.e. {se:.3f}), faster on {sum(x > 0 for x in logs)} of {len(logs)}"
    )


print(per_prompt(("float32", "ar"), ("bfloat16", "ar")))
print(per_prompt(("float32", METHOD), ("bfloat16", METHOD)))
print(per_prompt(("bfloat16", "ar"), ("bfloat16", METHOD)))
print(per_prompt(("float32", "ar"), ("float32", METHOD)))
