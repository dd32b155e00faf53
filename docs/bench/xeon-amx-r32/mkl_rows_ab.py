"""MKL for up to two rows (before) against up to three (the load's choice since SMALL_ROWS reached 4),
side by side in one process: TALON auto (the CPU default: the shipped head, K=6, mu=0.1, depth 5, cap 128) with
each setting's own cost curve, and plain decoding, on the head suite's 30 prompts (64 tokens, greedy),
the order of the two settings alternating per prompt.  From the repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r32/mkl_rows_ab.py [PROMPTS]

Prints the curves' verify(n) for n = 2..5, tokens/s per configuration (pooled), the per-prompt geometric
mean of the speed ratio with its spread, and how many runs equal plain decoding."""

import math
import statistics
import sys

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import encode_prompt
from talon.models.cpu_linear import PackedLinear, mkl_rows
from talon.models.fused_linear import fused_products
from talon.models.registry import ModelRegistry

target = ModelRegistry().get("embedded")
chosen = mkl_rows(target.model)
print(f"the load chose MKL up to {chosen} rows")
linears = [m for m in target.model.modules() if isinstance(m, PackedLinear)] + fused_products(target.model)


def set_rows(rows: int) -> None:
    for m in linears:
        m.plain_rows = rows


runner = MethodRunner(target, ModelRegistry(), "head")
items, _ = load_prompts(next(e for e in SUITES["head"].experiments if e.name == "auto_vs_fixed"))
items = items[: int(sys.argv[1])] if len(sys.argv) > 1 else items
method = "talon+auto"
cfg = tree_config(method, {"topk": 6, "mu": 0.1, "depth": 5, "cap": 128})
settings = (2, 3)
curves = {}
for rows in settings:
    set_rows(rows)
    curves[rows] = curve_for_run(target, runner.drafter(method), cfg)
    print(
        f"MKL up to {rows} rows: verify(2..5) " + " ".join(f"{curves[rows].verify_ratio(n):.3f}" for n in range(2, 6))
    )
decode = DecodeConfig(max_new_tokens=64)
rows_out = []
for i, item in enumerate(items):
    ids = encode_prompt(target, item["prompt"])
    set_rows(chosen)
    ar_trace, ar_s = timed_generation(target, None, tree_config("ar", {}), decode, ids, None)
    for rows in settings if i % 2 == 0 else settings[::-1]:
        set_rows(rows)
        trace, s = timed_generation(target, runner.drafter(method), cfg, decode, ids, curves[rows])
        rows_out.append(
            (
                rows,
                item["id"],
                len(trace.output_ids),
                s,
                trace.output_ids == ar_trace.output_ids,
                statistics.mean(len(st.tree) - 1 for st in trace.steps),
            )
        )
    rows_out.append(("ar", item["id"], len(ar_trace.output_ids), ar_s, True, 0.0))
set_rows(chosen)
for name in ("ar", *settings):
    mine = [r for r in rows_out if r[0] == name]
    tps = sum(r[2] for r in mine) / sum(r[3] for r in mine)
    print(
        f"{name!s:>3}: {tps:6.2f} tokens/s, draft nodes a step {statistics.mean(r[5] for r in mine):.2f}, "
        f"equal to ar {sum(r[4] for r in mine)}/{len(mine)}"
    )
a = {r[1]: r[3] for r in rows_out if r[0] == 2}
b = {r[1]: r[3] for r in rows_out if r[0] == 3}
logs = [math.log(a[p] / b[p]) for p in a]
se = statistics.stdev(logs) / math.sqrt(len(logs))
print(
    f"MKL to 3 rows over MKL to 2: per-prompt geometric mean {math.exp(statistics.mean(logs)):.3f} "
    f"(one s.e. {se:.3f}), faster on {sum(x > 0 for x in logs)} of {len(logs)}"
)
