"""How fast the run-level calibration scale and each cell's counts should learn: TALON auto and hybrid
auto's planned expected tokens (E) against the tokens they committed, per category, on 40 prompts no
suite runs (MT-Bench questions 9-32 of the round-robin order, three per MT-Bench category, and HumanEval
problems 8-23), for pairs ``SCALE:PRIOR`` of ``SCALE_STRENGTH`` (expected acceptances the run-level scale
starts from) and ``PRIOR_STRENGTH`` (observations a cell's prior is worth).  Greedy, 64 new tokens, the
device's cached cost curve; not timed (the decoded tokens and the trees do not depend on the clock).

    PYTHONPATH=. python docs/bench/calibration-scale-zen4/measure.py 10:8,5:8,3:8,10:4,20:8,10:16 > summary.txt

``--no-cells``: without the per-cell counts (each node's acceptance is its cell's prior under the
run-level scale alone), to see what the cells' own learning adds.
"""

import sys
from collections import defaultdict

from talon.bench.prompts import PromptSet, load_prompt_set
from talon.bench.runner import MethodRunner
from talon.config import device_default_tree
from talon.drafters import calibration as C
from talon.engine.decode import encode_prompt
from talon.models.registry import ModelRegistry

METHODS = ("talon+auto", "hybrid+auto")
MT_CATEGORIES = ("writing", "roleplay", "reasoning", "math", "coding", "extraction", "stem", "humanities")


def category(item: dict) -> str:
    if item["id"].startswith("mtbench-"):
        return MT_CATEGORIES[(int(item["id"].removeprefix("mtbench-")) - 81) // 10]
    return "humaneval"


def main(configs: list[tuple[float, float]]) -> None:
    items = load_prompt_set(PromptSet("mtbench"))[0][8:32] + load_prompt_set(PromptSet("humaneval"))[0][8:24]
    registry = ModelRegistry()
    target = registry.get("embedded")
    runner = MethodRunner(target, registry, "head")
    tree = device_default_tree(False)[0]
    kwargs = {k: getattr(tree, k) for k in ("budget", "topk", "mu", "depth", "gamma")}
    # (method, config, category) -> [planned E, committed, draft nodes, steps, plain steps], from the
    # per-step entries the benchmark writes (its E / realised columns)
    sums: dict[tuple, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0, 0.0, 0.0])
    for item in items:
        ids = encode_prompt(target, item["prompt"])
        for method in METHODS:
            for scale, prior in configs:
                C.SCALE_STRENGTH = {"model": scale, "retrieval": scale}
                C.Calibration.__init__.__defaults__ = (None, prior)
                for step in runner.run_one(method, kwargs, ids, 0.0, 64)["steps"]:
                    for cat in (category(item), "all"):
                        s = sums[(method, (scale, prior), cat)]
                        s[0] += step["expected"]
                        s[1] += step["accepted"] + 1
                        s[2] += step["nodes"]
                        s[3] += 1
                        s[4] += step["nodes"] == 0
        print(item["id"], file=sys.stderr, flush=True)
    cats = (*MT_CATEGORIES, "humaneval")
    for method in METHODS:
        for config in configs:
            dev = {c: 100 * (sums[(method, config, c)][0] / sums[(method, config, c)][1] - 1) for c in cats}
            a = sums[(method, config, "all")]
            print(
                f"{method} scale {config[0]:g} prior {config[1]:g}: pooled {100 * (a[0] / a[1] - 1):+.1f} %, "
                f"mean |category| {sum(map(abs, dev.values())) / len(dev):.1f}, max {max(map(abs, dev.values())):.1f}"
            )
            print("   E vs committed, %: " + ", ".join(f"{c} {d:+.0f}" for c, d in dev.items()))
            w = sums[(method, config, "writing")]
            print(
                "   nodes/step (x writing), plain steps: "
                + ", ".join(
                    f"{c} {s[2] / s[3]:.1f} ({s[2] / s[3] / (w[2] / w[3]):.2f}x) {100 * s[4] / s[3]:.0f} %"
                    for c in cats
                    for s in [sums[(method, config, c)]]
                )
            )


def without_cells(self, q: float, depth: int, source: str, match: int = 0) -> float:
    """``Calibration.__call__`` without the cell counts: the prior under the run-level scale."""
    return C.scale_odds(self.prior_of(C.cell(q, depth, source, match), q), self.scale(source))


if __name__ == "__main__":
    if "--no-cells" in sys.argv:
        C.Calibration.__call__ = without_cells
    main([tuple(float(x) for x in c.split(":")) for c in sys.argv[1].split(",")])
