"""Two values of one kernel setting of the target's packed linears and fused products, side by side in
one process: TALON auto (the CPU default: the shipped head, K=6, mu=0.1, depth 5, cap 128) with each
setting's own cost curve, and plain decoding (at the load's setting), on the head suite's 30 prompts
(64 tokens, greedy), the order of the two settings alternating per prompt.  From the repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r32/setting_ab.py plain_rows 2 3 [PROMPTS]   # MKL for 2 / 3 rows
    TALON_DTYPE=bfloat16 PYTHONPATH=. python docs/bench/xeon-amx-r32/setting_ab.py call_rows 0 32
    PYTHONPATH=. python docs/bench/xeon-amx-r32/setting_ab.py packed onednn:3 mkl:1   # packed kernel:MKL rows (run 33)

Prints the curves' verify(n), tokens/s per configuration (pooled), the per-prompt geometric mean of the
second setting's speed over the first's with its spread, and how many runs equal plain decoding."""

import math
import statistics
import sys

import torch

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import encode_prompt
from talon.models.cpu_linear import PackedLinear, PackedWeight, packed_kernel
from talon.models.fused_linear import fused_products
from talon.models.registry import ModelRegistry

attribute = sys.argv[1]
settings = tuple(sys.argv[2:4]) if attribute == "packed" else (int(sys.argv[2]), int(sys.argv[3]))
target = ModelRegistry().get("embedded")
linears = [m for m in target.model.modules() if isinstance(m, PackedLinear)] + fused_products(target.model)
linears = [m for m in linears if m.packed is not None]
if attribute == "packed":  # a copy for each kernel, switched between as the setting
    weights = [torch.cat([p.weight for p in m.parts]) if hasattr(m, "parts") else m.weight for m in linears]
    copies = {k: [PackedWeight(w, k.split(":")[0]) for w in weights] for k in settings}
    chosen = f"{packed_kernel(target.model)}:{linears[0].plain_rows}"
else:
    chosen = max(getattr(m, attribute) for m in linears)
print(f"{target.dtype}: the load set {attribute}={chosen}")


def set_rows(value) -> None:
    if attribute == "packed":  # the fused products' parts too: the curve's key reads the first linear's rows
        for m in target.model.modules():
            if isinstance(m, PackedLinear):
                m.plain_rows = int(value.split(":")[1])
    for i, m in enumerate(linears):
        if attribute == "packed":
            m.packed, m.plain_rows = copies[value][i], int(value.split(":")[1])
        else:
            setattr(m, attribute, value)


runner = MethodRunner(target, ModelRegistry(), "head")
items, _ = load_prompts(next(e for e in SUITES["head"].experiments if e.name == "auto_vs_fixed"))
items = items[: int(sys.argv[4])] if len(sys.argv) > 4 else items
method = "talon+auto"
cfg = tree_config(method, {"topk": 6, "mu": 0.1, "depth": 5, "cap": 128})
curves = {}
for rows in settings:
    set_rows(rows)
    curves[rows] = curve_for_run(target, runner.drafter(method), cfg)
    print(
        f"{attribute}={rows}: verify(2, 3, 4, 5, 16, 32) "
        + " ".join(f"{curves[rows].verify_ratio(n):.3f}" for n in (2, 3, 4, 5, 16, 32))
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
a = {r[1]: r[3] for r in rows_out if r[0] == settings[0]}
b = {r[1]: r[3] for r in rows_out if r[0] == settings[1]}
logs = [math.log(a[p] / b[p]) for p in a]
se = statistics.stdev(logs) / math.sqrt(len(logs))
print(
    f"{attribute}={settings[1]} over {settings[0]}: per-prompt geometric mean {math.exp(statistics.mean(logs)):.3f} "
    f"(one s.e. {se:.3f}), faster on {sum(x > 0 for x in logs)} of {len(logs)}"
)
