"""How fast each source's run-level calibration scale should learn: TALON auto's and hybrid auto's planned
expected tokens (E) against the tokens they committed, per category, for pairs ``MODEL:RETRIEVAL`` of
``SCALE_STRENGTH`` (the expected acceptances each source's run-level scale starts from).  Greedy, 64 new
tokens, the device's cached cost curve, the CPU default tree; not timed (the decoded tokens and the trees
do not depend on the clock).  ``PER_CATEGORY`` > 0: that many of the head trainer's held-out pool prompts
per pool category (a fixed sample, seed 1); 0: the headline suite's prompts.  From the repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r34/calibration_scale.py 8 10:10,4:10,4:4,2:10
    PYTHONPATH=. python docs/bench/xeon-amx-r34/calibration_scale.py 0 10:10,4:10,4:4
"""

import random
import sys
from collections import Counter, defaultdict

from talon.bench.runner import MethodRunner, timed_generation, tree_config
from talon.bench.suites import SUITES, load_prompts
from talon.config import DecodeConfig
from talon.drafters import calibration as C
from talon.engine.cost_measure import curve_for_run
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry
from talon.training.calibrate import heldout_prompts

TREE = {"topk": 6, "mu": 0.1, "depth": 5, "cap": 128}


def prompts(per_category: int) -> list[dict]:
    if per_category == 0:
        return load_prompts(SUITES["headline"].experiments[0])[0]
    by = defaultdict(list)
    for item in heldout_prompts():
        by[item["category"]].append(item)
    rng = random.Random(1)
    return [item for c in sorted(by) for item in rng.sample(by[c], per_category)]


def main(per_category: int, settings: list[tuple[float, float]]) -> None:
    items = prompts(per_category)
    registry = ModelRegistry()
    target = registry.get("embedded")
    runner = MethodRunner(target, registry, "head")
    for method in ("talon+auto", "hybrid+auto"):
        cfg = tree_config(method, TREE)
        curve = curve_for_run(target, runner.drafter(method), cfg)
        for model, retrieval in settings:
            C.SCALE_STRENGTH = {"model": model, "retrieval": retrieval}
            planned, committed = Counter(), Counter()
            for item in items:
                ids = encode_prompt(target, item["prompt"])
                trace, _ = timed_generation(
                    target, runner.drafter(method), cfg, DecodeConfig(max_new_tokens=64), ids, curve
                )
                for step in trace.steps:
                    if step.expected is not None:
                        planned[item["category"]] += step.expected
                        committed[item["category"]] += len(step.committed_ids)
            err = {c: 100 * (planned[c] / committed[c] - 1) for c in sorted(planned)}
            pooled = 100 * (sum(planned.values()) / sum(committed.values()) - 1)
            print(
                f"{method} {model:g}:{retrieval:g}: pooled {pooled:+.1f} %, mean |category| "
                f"{sum(map(abs, err.values())) / len(err):.1f}, max {max(map(abs, err.values())):.1f}; "
                + ", ".join(f"{c} {e:+.1f}" for c, e in err.items()),
                flush=True,
            )


if __name__ == "__main__":
    main(int(sys.argv[1]), [tuple(float(v) for v in s.split(":")) for s in sys.argv[2].split(",")])
