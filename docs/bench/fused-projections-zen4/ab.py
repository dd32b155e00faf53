"""One packed product for each layer's query/key/value and gate/up projections, side by side with the
separate products: a cost curve for each setting (measured twice, alternately), then the headline's 30
prompts with our `ar`, TALON auto and hybrid auto in each setting (each on its own curve) and transformers'
`generate()` on an unmodified model, interleaved per prompt in a shuffled order, two rounds, wall clock.
From the repository root, nothing else running:

    PYTHONPATH=. python docs/bench/fused-projections-zen4/ab.py OUT_DIR"""

import json
import math
import random
import statistics
import sys
import types
from pathlib import Path

import torch

from talon.bench.peers import run_peer
from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig, device_default_tree
from talon.engine.cost_measure import measure_curve
from talon.engine.decode import encode_prompt
from talon.models.cpu_linear import PACK_BATCH_HINT
from talon.models.fused_linear import FUSIONS, FusedRows
from talon.models.registry import ModelRegistry

out = Path(sys.argv[1])
out.mkdir(parents=True, exist_ok=True)
registry = ModelRegistry()
target = registry.get("embedded")
stock = registry.get_stock("embedded")
runner = MethodRunner(target, registry, "head")
default = device_default_tree(False)[0]
tree = {k: getattr(default, k) for k in ("topk", "mu", "depth", "gamma")}
methods = ("talon+auto", "hybrid+auto")
cfgs = {m: tree_config(m, tree) for m in methods}
fused = []  # (module, fused forward, parts, the parts' own packed copies)
for module in target.model.modules():
    for _, _, attribute, _ in FUSIONS:
        rows = vars(module).get(attribute)
        if isinstance(rows, FusedRows):
            own = [torch.ops.mkldnn._reorder_linear_weight(p.weight.detach(), PACK_BATCH_HINT) for p in rows.parts]
            fused.append((module, module.forward, rows.parts, own))
assert fused, "no fused layers: nothing to compare"


def use_fused(on: bool) -> None:
    """On: each layer's fused forward, its parts without packed copies (as loaded); off: transformers'
    forward over the parts' own packed products."""
    for module, forward, parts, own in fused:
        if on:
            module.forward = forward
        else:
            vars(module).pop("forward", None)
        for part, packed in zip(parts, own):
            part.packed = None if on else packed


curves = {}
for setting in ("fused", "separate", "fused", "separate"):  # each twice, alternately; the first of each is used
    use_fused(setting == "fused")
    for m in methods:
        c = measure_curve(target, runner.drafter(m), note=f"{setting} projections, ab.py")
        curves.setdefault((m, setting), []).append(c)
        v = dict(c.verify)
        print(
            m,
            setting,
            f"plain {c.plain * 1e3:.2f} ms; verify(8) {v[8] / c.plain:.3f} verify(16) {v[16] / c.plain:.3f} "
            f"verify(32) {v[32] / c.plain:.3f}",
            flush=True,
        )

items, _ = load_prompts(SUITES["headline"].experiments[0])
variants = [("hf_generate", None)] + [(m, s) for m in ("ar", *methods) for s in ("fused", "separate")]
order = random.Random(0)
rows = []
for k, item in enumerate(items):
    ids = encode_prompt(target, item["prompt"])
    for rnd in range(2):
        order.shuffle(variants)
        for method, setting in variants:
            dec = DecodeConfig(max_new_tokens=64)
            if method == "hf_generate":
                row = run_peer("hf_generate", stock, ids, 64)
                new, s = row["token_ids"], row["seconds"]
                steps, nodes, expected = len(new), 0, 0.0
            else:
                use_fused(setting == "fused")
                drafter = None if method == "ar" else runner.drafter(method)
                cfg = tree_config("ar", {}) if method == "ar" else cfgs[method]
                curve = None if method == "ar" else curves[(method, setting)][0]
                trace, s = timed_generation(target, drafter, cfg, dec, ids, curve)
                new = [t for st in trace.steps for t in st.committed_ids]
                steps = len(trace.steps)
                nodes = sum(len(st.tree) - 1 for st in trace.steps)
                expected = sum(st.expected or 0.0 for st in trace.steps)
            rows.append(
                {
                    "prompt": k,
                    "category": item["category"],
                    "round": rnd,
                    "method": method,
                    "setting": setting,
                    "seconds": s,
                    "tokens": len(new),
                    "steps": steps,
                    "nodes": nodes,
                    "expected": expected,
                    "ids": new,
                }
            )
    print(f"prompt {k + 1}/{len(items)} done", flush=True)
use_fused(True)

(out / "runs.json").write_text(
    json.dumps({"rows": rows, "curves": {f"{m} {s}": [c.to_dict() for c in cs] for (m, s), cs in curves.items()}})
)


def speed(rs):
    return sum(r["tokens"] for r in rs) / sum(r["seconds"] for r in rs)


def pick(method, setting=None):
    return [r for r in rows if r["method"] == method and r["setting"] == setting]


ar_ids = {(r["prompt"], r["round"]): r["ids"] for r in pick("ar", "fused")}
lines = [f"hf_generate {speed(pick('hf_generate')):.1f} tokens/s"]
for m in ("ar", *methods):
    for s in ("fused", "separate"):
        rs = pick(m, s)
        equal = sum(r["ids"] == ar_ids[(r["prompt"], r["round"])] for r in rs)
        lines.append(
            f"{m} {s}: {speed(rs):.1f} tokens/s, {speed(rs) / speed(pick('hf_generate')):.3f}x generate, "
            f"{speed(rs) / speed(pick('ar', s)):.3f}x its ar, nodes/step "
            f"{sum(r['nodes'] for r in rs) / sum(r['steps'] for r in rs):.2f}, equal to fused ar {equal}/{len(rs)}"
        )
    per = [
        (a["tokens"] / a["seconds"]) / (b["tokens"] / b["seconds"])
        for a in pick(m, "fused")
        for b in pick(m, "separate")
        if (a["prompt"], a["round"]) == (b["prompt"], b["round"])
    ]
    logs = [math.log(x) for x in per]
    gm = math.exp(statistics.mean(logs))
    se = statistics.stdev(logs) / len(logs) ** 0.5
    lines.append(
        f"{m}: fused / separate per run {gm:.3f}x geometric mean (one s.e. {se:.3f}), "
        f"range {min(per):.2f}-{max(per):.2f}, fused faster on {sum(x > 1 for x in per)} of {len(per)}"
    )
hf_ids = {(r["prompt"], r["round"]): r["ids"] for r in pick("hf_generate")}
lines.append(f"generate equal to fused ar: {sum(hf_ids[k] == v for k, v in ar_ids.items())}/{len(ar_ids)}")
(out / "summary.txt").write_text("\n".join(lines) + "\n")
print("\n".join(lines))
