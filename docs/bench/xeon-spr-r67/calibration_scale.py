"""How fast each source's run-level calibration scale should learn (``SCALE_STRENGTH``, the expected
acceptances the scale starts from), decoded for real under each setting (the auto-sized trees follow
what the calibration plans): TALON auto's and hybrid auto's planned expected tokens (E) over the
tokens they committed, per category, for pairs ``MODEL:RETRIEVAL``.  Greedy, 64 new tokens, the CPU
default tree, the device's cached cost curve; not timed (the trees and tokens do not depend on the
clock).  Prompt sets (``SET``):

- ``pool``: the head trainer's held-out pool, 8 prompts a pool category (a fixed sample, seed 1);
- ``mtbench-humaneval``: MT-Bench questions 9-32 (round-robin order) and HumanEval problems 8-23, which
  no suite runs;
- ``calibration``: ``assets/calibration_prompts.jsonl`` (their trees also fitted the shipped tables);
- ``style``: ``assets/bench_style_prompts.jsonl`` (the paper and sources suites run them);
- ``headline``: the headline suite's prompts (reported, not used to choose).

    PYTHONPATH=. python docs/bench/xeon-spr-r67/calibration_scale.py SET 4:10,2:2,1:2 [METHOD,...]

(``METHOD``s: ``talon+auto`` and ``hybrid+auto`` by default.)
"""

import random
import sys
from collections import defaultdict

from talon.bench.prompts import STYLE_PROMPTS, PromptSet, load_prompt_set, read_prompts
from talon.bench.runner import MethodRunner
from talon.bench.suites import SUITES, load_prompts
from talon.config import device_default_tree
from talon.drafters import calibration as C
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry
from talon.training.calibrate import CALIBRATION_PROMPTS, heldout_prompts

METHODS = ("talon+auto", "hybrid+auto")
MT_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def prompt_set(name: str) -> list[dict]:
    if name == "pool":
        by = defaultdict(list)
        for item in heldout_prompts():
            by[item["category"]].append(item)
        rng = random.Random(1)
        return [item for c in sorted(by) for item in rng.sample(by[c], 8)]
    if name == "mtbench-humaneval":
        mt = load_prompt_set(PromptSet("mtbench"))[0][8:32]
        for item in mt:
            item["category"] = MT_CATEGORIES[(int(item["id"].removeprefix("mtbench-")) - 81) // 10]
        return mt + [dict(item, category="humaneval") for item in load_prompt_set(PromptSet("humaneval"))[0][8:24]]
    if name == "calibration":
        return read_prompts(CALIBRATION_PROMPTS)
    if name == "style":
        return read_prompts(STYLE_PROMPTS)
    if name == "headline":
        return load_prompts(SUITES["headline"].experiments[0])[0]
    raise SystemExit(f"unknown prompt set {name!r}")


def main(name: str, settings: list[tuple[float, float]], methods: tuple[str, ...] = METHODS) -> None:
    items = prompt_set(name)
    registry = ModelRegistry()
    target = registry.get("embedded")
    runner = MethodRunner(target, registry, "head")
    tree = device_default_tree(False)[0]
    kwargs = {k: getattr(tree, k) for k in ("budget", "topk", "mu", "depth", "gamma")}
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0])  # (method, setting, category) -> [E, committed]
    for item in items:
        ids = encode_prompt(target, item["prompt"])
        for method in methods:
            for model, retrieval in settings:
                C.SCALE_STRENGTH = {"model": model, "retrieval": retrieval}
                for step in runner.run_one(method, kwargs, ids, 0.0, 64)["steps"]:
                    s = sums[(method, (model, retrieval), item.get("category", "?"))]
                    s[0] += step["expected"]
                    s[1] += step["accepted"] + 1
        print(item["id"], file=sys.stderr, flush=True)
    print(f"## {name} ({len(items)} prompts)")
    for method in methods:
        for setting in settings:
            err = {c: 100 * (e / r - 1) for (m, s, c), (e, r) in sorted(sums.items()) if m == method and s == setting}
            e_all = sum(e for (m, s, _), (e, _r) in sums.items() if m == method and s == setting)
            r_all = sum(r for (m, s, _), (_e, r) in sums.items() if m == method and s == setting)
            print(
                f"{method} {setting[0]:g}:{setting[1]:g}: pooled {100 * (e_all / r_all - 1):+.1f} %, mean |category| "
                f"{sum(map(abs, err.values())) / len(err):.1f}, max {max(map(abs, err.values())):.1f}; "
                + ", ".join(f"{c} {v:+.1f}" for c, v in err.items()),
                flush=True,
            )


if __name__ == "__main__":
    settings = [tuple(float(v) for v in s.split(":")) for s in sys.argv[2].split(",")]
    main(sys.argv[1], settings, tuple(sys.argv[3].split(",")) if len(sys.argv) > 3 else METHODS)
