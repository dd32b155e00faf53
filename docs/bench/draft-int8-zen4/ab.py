"""The draft head's int8 copies for few-row calls, side by side with its bfloat16 weights: the cost curve
of each (a head call, the step's first call), then TALON auto and hybrid auto on the headline's 30
prompts with each setting on its own curve, interleaved per prompt with `ar` (shuffled order, two rounds),
wall clock.  From the repository root, nothing else running:

    PYTHONPATH=. python docs/bench/draft-int8-zen4/ab.py OUT_DIR"""

import json
import math
import random
import statistics
import sys
from pathlib import Path

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig, device_default_tree
from talon.engine.cost_measure import measure_curve
from talon.engine.decode import encode_prompt
from talon.models.cpu_linear import INT8_ROWS, PackedLinear
from talon.models.registry import ModelRegistry

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
registry = ModelRegistry()
target = registry.get("embedded")
runner = MethodRunner(target, registry, "head")
default = device_default_tree(False)[0]
tree = {k: getattr(default, k) for k in ("topk", "mu", "depth", "gamma")}
methods = ("talon+auto", "hybrid+auto")
cfgs = {m: tree_config(m, tree) for m in methods}
head = runner.drafter("talon+auto").head
layers = [m for m in head.modules() if isinstance(m, PackedLinear) and m.int8_weight is not None]
assert layers, "no int8 copies: TALON_DRAFT_INT8=off, or the kernel is not faster here"


def use_int8(on: bool) -> None:
    for m in layers:
        m.int8_rows = INT8_ROWS if on else 0


curves = {}
for setting in ("int8", "bfloat16", "int8", "bfloat16"):  # each measured twice, alternately; the first pair is used
    use_int8(setting == "int8")
    for m in methods:
        c = measure_curve(target, runner.drafter(m), note=f"{setting} head, ab.py")
        curves.setdefault((m, setting), []).append(c)
        print(
            m,
            setting,
            "plain",
            round(c.plain * 1e3, 2),
            "ms; call(1)",
            round(c.call[0][1] / c.plain, 3),
            "root",
            round(c.root / c.plain, 3),
            "verify(8)",
            round(dict(c.verify)[8] / c.plain, 3),
            flush=True,
        )

items, _ = load_prompts(SUITES["headline"].experiments[0])
variants = [("ar", None)] + [(m, s) for m in methods for s in ("int8", "bfloat16")]
order = random.Random(0)
rows = []
for k, item in enumerate(items):
    ids = encode_prompt(target, item["prompt"])
    for rnd in range(2):
        order.shuffle(variants)
        for method, setting in variants:
            dec = DecodeConfig(max_new_tokens=64)
            if method == "ar":
                trace, s = timed_generation(target, None, tree_config("ar", {}), dec, ids)
            else:
                use_int8(setting == "int8")
                trace, s = timed_generation(
                    target, runner.drafter(method), cfgs[method], dec, ids, curves[(method, setting)][0]
                )
            steps = trace.steps
            rows.append(
                {
                    "prompt": k,
                    "category": item["category"],
                    "round": rnd,
                    "method": method,
                    "setting": setting,
                    "seconds": s,
                    "tokens": sum(len(st.committed_ids) for st in steps),
                    "steps": len(steps),
                    "nodes": sum(len(st.tree) - 1 for st in steps),
                    "expected": sum(st.expected or 0.0 for st in steps),
                    "ids": [t for st in steps for t in st.committed_ids],
                }
            )
    print(f"prompt {k + 1}/{len(items)} done", flush=True)

(out / "runs.json").write_text(
    json.dumps({"rows": rows, "curves": {f"{m} {s}": [c.to_dict() for c in cs] for (m, s), cs in curves.items()}})
)
lines = []
ar_ids = {(r["prompt"], r["round"]): r["ids"] for r in rows if r["method"] == "ar"}


def speed(rs):
    return sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs)


ar_speed = speed([r for r in rows if r["method"] == "ar"])
lines.append(f"ar {ar_speed:.1f} tokens/s")
for m in methods:
    per = {}
    for s in ("int8", "bfloat16"):
        rs = [r for r in rows if r["method"] == m and r["setting"] == s]
        equal = sum(r["ids"] == ar_ids[(r["prompt"], r["round"])] for r in rs)
        steps = sum(r["steps"] for r in rs)
        lines.append(
            f"{m} {s}: {speed(rs):.1f} tokens/s, {speed(rs) / ar_speed:.3f}x ar, nodes/step "
            f"{sum(r['nodes'] for r in rs) / steps:.2f}, tokens/step {sum(r['tokens'] for r in rs) / steps:.3f}, "
            f"E/realised {sum(r['expected'] for r in rs) / sum(r['tokens'] for r in rs) - 1:+.3f}, "
            f"equal to ar {equal}/{len(rs)}"
        )
        per[s] = {(r["prompt"], r["round"]): r["tokens"] / r["seconds"] for r in rs}
    logs = [math.log(per["int8"][key] / per["bfloat16"][key]) for key in per["int8"]]
    gm = math.exp(statistics.mean(logs))
    se = statistics.stdev(logs) / math.sqrt(len(logs))
    lines.append(
        f"{m} int8 / bfloat16 per run: geometric mean {gm:.3f} (one standard error {math.exp(se) - 1:.3f}; "
        f"range {math.exp(min(logs)):.2f}-{math.exp(max(logs)):.2f}; "
        f"int8 faster on {sum(x > 0 for x in logs)} of {len(logs)})"
    )
(out / "summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
