"""Which code drafts faster on this device: TALON with the shipped head at fixed N = 16 / 24 / 32 and
auto-sized (cap 128), and plain decoding, on the head suite's 30 prompts (64 tokens, greedy), the
configurations interleaved per prompt.  Run from the repository root with PYTHONPATH naming the code
to measure; writes one JSON of per-run rows and prints the summary:

    PYTHONPATH=. python docs/bench/gpu-host-work-h200/ab.py OUT.json LABEL [PROMPTS]

Per run: tokens, wall seconds (prefill to last token, synchronised), steps, and from the trace the
draft seconds per drafter call and the verify seconds per step (the engine's own step clocks)."""

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
    "16": ("talon", {**base, "budget": 16}),
    "24": ("talon", {**base, "budget": 24}),
    "32": ("talon", {**base, "budget": 32}),
    "auto": ("talon+auto", {**base, "cap": 128}),
}


def one(name: str, ids: list[int]) -> dict:
    method, kwargs = configs[name]
    cfg = tree_config(method, kwargs)
    curve = runner.curve(method, cfg) if method != "ar" else None
    drafter = runner.drafter(method) if method != "ar" else None
    trace, seconds = timed_generation(target, drafter, cfg, DecodeConfig(max_new_tokens=64), ids, curve)
    steps = trace.steps
    calls = sum(len(s.call_widths) for s in steps)
    return {
        "config": name,
        "tokens": len(trace.output_ids),
        "output": trace.output_ids,
        "seconds": seconds,
        "steps": len(steps),
        "draft_nodes": statistics.mean(len(s.tree) - 1 for s in steps),
        "draft_s_per_call": sum(s.draft_seconds for s in steps) / calls if calls else None,
        "calls_per_step": calls / len(steps),
        "verify_s_per_step": statistics.mean(s.verify_seconds for s in steps),
        "bookkeeping_s_per_step": statistics.mean(s.bookkeeping_seconds for s in steps),
    }


t0 = time.perf_counter()
first = encode_prompt(target, items[0]["prompt"])
for name in configs:  # capture graphs, measure the cost curve, warm the allocator
    one(name, first)
print(f"{label}: warm-up {time.perf_counter() - t0:.1f} s", flush=True)
rows = []
for i, item in enumerate(items, start=1):
    ids = encode_prompt(target, item["prompt"])
    for name in configs:
        rows.append({"prompt": item["id"], **one(name, ids)})
    if i % 10 == 0:
        print(f"{label}: {i}/{len(items)} prompts, {time.perf_counter() - t0:.0f} s", flush=True)
curve = runner._curves
json.dump(
    {
        "label": label,
        "device": torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu",
        "curves": {k: (v.to_dict() if v is not None else None) for k, v in curve.items()},
        "rows": rows,
    },
    open(out_path, "w"),
)
ar = {r["prompt"]: r for r in rows if r["config"] == "ar"}
for name in configs:
    mine = [r for r in rows if r["config"] == name]
    tps = sum(r["tokens"] for r in mine) / sum(r["seconds"] for r in mine)
    same = sum(r["output"] == ar[r["prompt"]]["output"] for r in mine)
    per_call = [r["draft_s_per_call"] for r in mine if r["draft_s_per_call"] is not None]
    print(
        f"{label} {name:>4}: {tps:7.1f} tok/s  nodes {statistics.mean(r['draft_nodes'] for r in mine):5.1f}  "
        f"calls/step {statistics.mean(r['calls_per_step'] for r in mine):4.2f}  "
        f"draft ms/call {1e3 * statistics.mean(per_call) if per_call else 0:5.2f}  "
        f"verify ms/step {1e3 * statistics.mean(r['verify_s_per_step'] for r in mine):5.2f}  "
        f"same as ar {same}/{len(mine)}"
    )
