"""float32 against exact bfloat16 on this CPU, side by side: a cost curve for TALON auto in each dtype, then
the headline's 30 prompts with our `ar` and TALON auto in each dtype and transformers' `generate()` on an
unmodified float32 model, interleaved per prompt in a shuffled order, one round, wall clock.  From the
repository root, nothing else running:

    PYTHONPATH=. python docs/bench/xeon-amx-r31/dtype_ab.py OUT_DIR"""

import json
import math
import random
import statistics
import sys
from pathlib import Path

import torch

from talon.bench.peers import run_peer
from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig, device_default_tree
from talon.engine.cost_measure import measure_curve
from talon.engine.decode import encode_prompt
from talon.models.loading import load_model
from talon.models.registry import ModelRegistry

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
registry = ModelRegistry()
targets = {"float32": registry.get("embedded"), "bfloat16": load_model("embedded", dtype=torch.bfloat16)}
stock = registry.get_stock("embedded")
runners = {d: MethodRunner(t, registry, "head") for d, t in targets.items()}
default = device_default_tree(False)[0]
cfg = tree_config("talon+auto", {k: getattr(default, k) for k in ("topk", "mu", "depth", "gamma")})
curves = {}
for d in ("float32", "bfloat16"):
    c = measure_curve(targets[d], runners[d].drafter("talon+auto"), note=f"{d}, dtype_ab.py")
    curves[d] = c
    v = dict(c.verify)
    print(
        d,
        f"plain {c.plain * 1e3:.2f} ms; verify(16) {v[16] / c.plain:.3f} verify(32) {v[32] / c.plain:.3f}",
        flush=True,
    )

items, _ = load_prompts(SUITES["headline"].experiments[0])
variants = [("hf_generate", "float32")] + [(m, d) for m in ("ar", "talon+auto") for d in targets]
order = random.Random(0)
rows = []
for k, item in enumerate(items):
    order.shuffle(variants)
    for method, dtype in variants:
        target = targets[dtype]
        ids = encode_prompt(target, item["prompt"])
        if method == "hf_generate":
            row = run_peer("hf_generate", stock, ids, 64)
            new, s, steps, nodes = row["token_ids"], row["seconds"], len(row["token_ids"]), 0
        else:
            drafter = None if method == "ar" else runners[dtype].drafter(method)
            trace, s = timed_generation(
                target,
                drafter,
                tree_config("ar", {}) if method == "ar" else cfg,
                DecodeConfig(max_new_tokens=64),
                ids,
                None if method == "ar" else curves[dtype],
            )
            new = [t for st in trace.steps for t in st.committed_ids]
            steps, nodes = len(trace.steps), sum(len(st.tree) - 1 for st in trace.steps)
        rows.append(
            {
                "prompt": k,
                "category": item["category"],
                "method": method,
                "dtype": dtype,
                "seconds": s,
                "tokens": len(new),
                "steps": steps,
                "nodes": nodes,
                "ids": new,
            }
        )
    print(f"prompt {k + 1}/{len(items)} done", flush=True)
(out / "runs.json").write_text(json.dumps({"rows": rows, "curves": {d: c.to_dict() for d, c in curves.items()}}))


def pick(method, dtype):
    return [r for r in rows if r["method"] == method and r["dtype"] == dtype]


def speed(rs):
    return sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs)


gen = speed(pick("hf_generate", "float32"))
lines = [f"hf_generate (float32, unmodified) {gen:.1f} tokens/s"]
for d in targets:
    ar = {r["prompt"]: r["ids"] for r in pick("ar", d)}
    for m in ("ar", "talon+auto"):
        rs = pick(m, d)
        lines.append(
            f"{m} {d}: {speed(rs):.1f} tokens/s, {speed(rs) / gen:.3f}x float32 generate, "
            f"{speed(rs) / speed(pick('ar', d)):.3f}x its ar, nodes/step {sum(r['nodes'] for r in rs) / sum(r['steps'] for r in rs):.2f}, "
            f"equal to its ar {sum(r['ids'] == ar[r['prompt']] for r in rs)}/{len(rs)}"
        )
for m in ("ar", "talon+auto"):
    per = [
        (a["tokens"] / a["seconds"]) / (b["tokens"] / b["seconds"])
        for a in pick(m, "bfloat16")
        for b in pick(m, "float32")
        if a["prompt"] == b["prompt"]
    ]
    logs = [math.log(x) for x in per]
    lines.append(
        f"{m}: bfloat16 / float32 per prompt {math.exp(statistics.mean(logs)):.3f}x geometric mean "
        f"(one s.e. {statistics.stdev(logs) / len(logs) ** 0.5:.3f}), range {min(per):.2f}-{max(per):.2f}, "
        f"bfloat16 faster on {sum(x > 1 for x in per)} of {len(per)}"
    )
same = sum(
    a["ids"] == b["ids"] for a in pick("ar", "bfloat16") for b in pick("ar", "float32") if a["prompt"] == b["prompt"]
)
lines.append(f"bfloat16 ar's tokens equal float32 ar's on {same}/{len(items)} prompts (a precision change)")
(out / "summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
