"""float32 (the default) against bfloat16 with the row-invariant forward, side by side: both targets
loaded in one process, every (dtype, method) run of a prompt in a shuffled order before the next
prompt, 64 tokens, greedy, the CPU's default tree settings, the shipped head.  Writes one JSON line per
run (seconds, tokens, whether the tokens equal the same dtype's ``ar`` and float32's ``ar``).

    PYTHONPATH=. python docs/bench/bf16-invariance-cpu-epyc-zen4/side_by_side.py REPS METHODS OUT [PROMPTS]
    PYTHONPATH=. python docs/bench/bf16-invariance-cpu-epyc-zen4/side_by_side.py --summary OUT

METHODS: comma-separated, besides ``ar`` (e.g. ``talon+auto,hybrid+auto,hf_generate``; the
transformers peers run an unmodified copy of the target in the same dtype).  PROMPTS: the first N of
the headline suite's 30.
"""

import collections
import json
import random
import statistics
import sys

import torch

from talon.bench.runner import MethodRunner
from talon.bench.suites import get_suite, load_prompts
from talon.config import device_default_tree
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16}


def measure(reps: int, methods: list[str], out: str, limit: int) -> None:
    runners = {}
    for name, dtype in DTYPES.items():
        registry = ModelRegistry(dtype=dtype)
        runners[name] = MethodRunner(registry.get("embedded"), registry, "head", target_spec="embedded")
        print(name, runners[name].target.model.config._attn_implementation, flush=True)
    items = load_prompts(get_suite("headline").experiments[0])[0][:limit]
    tree = device_default_tree(False)[0]
    kwargs = {k: getattr(tree, k) for k in ("budget", "topk", "mu", "depth", "gamma")}
    warm = encode_prompt(runners["fp32"].target, items[0]["prompt"])
    for runner in runners.values():
        for method in ["ar", *methods]:
            runner.run_one(method, kwargs, warm, 0.0, 8)
    order = random.Random(0)
    with open(out, "a") as f:
        for rep in range(reps):
            for item in items:
                ids = encode_prompt(runners["fp32"].target, item["prompt"])
                jobs = [(d, m) for d in runners for m in ["ar", *methods]]
                order.shuffle(jobs)
                rows = {(d, m): runners[d].run_one(m, kwargs, ids, 0.0, 64) for d, m in jobs}
                for (d, m), row in rows.items():
                    record = {
                        "rep": rep,
                        "id": item["id"],
                        "category": item.get("category"),
                        "dtype": d,
                        "method": m,
                        "seconds": row["seconds"],
                        "new_tokens": row["new_tokens"],
                        "equal": row["token_ids"] == rows[(d, "ar")]["token_ids"],
                        "equal_fp32": row["token_ids"] == rows[("fp32", "ar")]["token_ids"],
                    }
                    f.write(json.dumps(record) + "\n")
                f.flush()
                print(rep, item["id"], flush=True)


def summary(path: str) -> None:
    rows = [json.loads(line) for line in open(path)]
    seconds, tokens, equal, equal32, runs = (collections.defaultdict(float) for _ in range(5))
    for r in rows:
        k = (r["dtype"], r["method"])
        seconds[k] += r["seconds"]
        tokens[k] += r["new_tokens"]
        equal[k] += r["equal"]
        equal32[k] += r["equal_fp32"]
        runs[k] += 1
    print("dtype method tokens/s x(fp32 ar) x(same-dtype ar) equal-to-same-dtype-ar equal-to-fp32-ar")
    for k in sorted(seconds):
        print(
            k[0],
            k[1],
            f"{tokens[k] / seconds[k]:.1f}",
            f"{seconds[('fp32', 'ar')] / seconds[k]:.2f}",
            f"{seconds[(k[0], 'ar')] / seconds[k]:.2f}",
            f"{int(equal[k])}/{int(runs[k])}",
            int(equal32[k]),
        )
    for method in sorted({r["method"] for r in rows}):
        pairs = collections.defaultdict(dict)
        for r in rows:
            if r["method"] == method:
                pairs[(r["rep"], r["id"])][r["dtype"]] = r["seconds"]
        ratios = [p["fp32"] / p["bf16"] for p in pairs.values() if len(p) == 2]
        q = statistics.quantiles(ratios, n=4)
        print(
            f"{method}: bfloat16 speed / float32 per prompt, median {statistics.median(ratios):.2f},"
            f" quartiles {q[0]:.2f}-{q[2]:.2f}, range {min(ratios):.2f}-{max(ratios):.2f}"
        )


if __name__ == "__main__":
    if sys.argv[1] == "--summary":
        summary(sys.argv[2])
    else:
        measure(int(sys.argv[1]), sys.argv[2].split(","), sys.argv[3], int(sys.argv[4]) if len(sys.argv) > 4 else 99)
