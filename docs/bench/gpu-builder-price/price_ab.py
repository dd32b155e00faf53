"""Does pricing the tree builder's own work per drafter call (``CostCurve.builder``) help auto-sized
trees on this device?  TALON with the shipped head at fixed N = 24, auto-sized (cap 128) priced by the
measured curve, the same auto-sized run priced without that piece (the curve before it), and plain
decoding, interleaved per prompt on the head suite's 30 prompts (64 tokens, greedy).  From the
repository root (writes one JSON of per-run rows and prints the summary):

    PYTHONPATH=. python docs/bench/gpu-builder-price/price_ab.py OUT.json LABEL [PROMPTS]"""

import dataclasses
import json
import statistics
import sys
import time

import torch

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry

out_path, label = sys.argv[1], sys.argv[2]
registry = ModelRegistry()
target = registry.get("embedded")
runner = MethodRunner(target, registry, "head")
experiment = next(e for e in SUITES["head"].experiments if e.name == "auto_vs_fixed")
items, _ = load_prompts(experiment)
items = items[: int(sys.argv[3])] if len(sys.argv) > 3 else items
base = dict(topk=10, mu=0.03, depth=8)
configs = {
    "ar": ("ar", {}),
    "24": ("talon", {**base, "budget": 24}),
    "auto": ("talon+auto", {**base, "cap": 128}),
    "auto-no-builder": ("talon+auto", {**base, "cap": 128}),
}


def one(name: str, ids: list[int]) -> dict:
    method, kwargs = configs[name]
    cfg = tree_config(method, kwargs)
    curve = runner.curve(method, cfg) if method != "ar" else None
    if name == "auto-no-builder":
        curve = dataclasses.replace(curve, builder=0.0)
    drafter = runner.drafter(method) if method != "ar" else None
    trace, seconds = timed_generation(target, drafter, cfg, DecodeConfig(max_new_tokens=64), ids, curve)
    steps = trace.steps
    return {
        "config": name,
        "tokens": len(trace.output_ids),
        "output": trace.output_ids,
        "seconds": seconds,
        "steps": len(steps),
        "tree_steps": sum(len(s.tree) > 1 for s in steps),
        "draft_nodes": statistics.mean(len(s.tree) - 1 for s in steps),
        "price": statistics.mean(s.price for s in steps) if all(s.price is not None for s in steps) else None,
        "expected": statistics.mean(s.expected for s in steps) if all(s.expected is not None for s in steps) else None,
    }


t0 = time.perf_counter()
first = encode_prompt(target, items[0]["prompt"])
for name in configs:  # capture graphs, measure the cost curve, warm the allocator
    one(name, first)
print(f"{label}: warm-up {time.perf_counter() - t0:.1f} s", flush=True)
rows = []
for item in items:
    ids = encode_prompt(target, item["prompt"])
    for name in configs:
        rows.append({"prompt": item["id"], **one(name, ids)})
curve = runner.curve("talon+auto", tree_config("talon+auto", {**base, "cap": 128}))
json.dump(
    {
        "label": label,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "curve": curve.to_dict(),
        "rows": rows,
    },
    open(out_path, "w"),
)
print(
    f"{label}: plain {curve.plain * 1e3:.2f} ms, root call {curve.root * 1e3:.2f} ms, call(1) "
    f"{curve.call_seconds(1) * 1e3:.2f} ms, builder {curve.builder * 1e3:.2f} ms a call, bookkeeping "
    f"{curve.observe * 1e3:.2f} ms, verify(16) {curve.verify_ratio(16):.2f} plain steps"
)
ar = {r["prompt"]: r for r in rows if r["config"] == "ar"}
ar_tps = sum(r["tokens"] for r in ar.values()) / sum(r["seconds"] for r in ar.values())
for name in configs:
    mine = [r for r in rows if r["config"] == name]
    tps = sum(r["tokens"] for r in mine) / sum(r["seconds"] for r in mine)
    same = sum(r["output"] == ar[r["prompt"]]["output"] for r in mine)
    tree_share = sum(r["tree_steps"] for r in mine) / sum(r["steps"] for r in mine)
    print(
        f"{label} {name:>15}: {tps:7.1f} tok/s ({tps / ar_tps:.2f}x ar)  nodes "
        f"{statistics.mean(r['draft_nodes'] for r in mine):5.1f}  tree steps {tree_share:.0%}  "
        f"same as ar {same}/{len(mine)}"
    )
