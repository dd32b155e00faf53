"""Side by side: METHOD+auto (talon or hybrid) with the shipped calibration tables against the previous fit
(``PREVIOUS``, a head directory's two calibration files; by default ``previous/`` beside this script), interleaved per
prompt with ``ar`` on the headline suite's 30 prompts, under the cached cost curve.  One drafter object; only its
``calibration_prior`` is swapped.

    PYTHONPATH=. python docs/bench/calibration-ab-cpu-epyc/measure.py talon|hybrid [PREVIOUS]
"""

import sys
from pathlib import Path

from talon.bench.prompts import load_prompt_set
from talon.bench.suites import HEADLINE_PROMPTS
from talon.config import DecodeConfig, TreeConfig
from talon.drafters import calibration as C
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import cost_curve_for
from talon.engine.decode import run_to_end
from talon.models.registry import ModelRegistry

HERE = Path(__file__).resolve().parent
ARMS = ("new", "old")


def main(method: str, previous: Path = HERE / "previous") -> None:
    prompts = [p for ps in HEADLINE_PROMPTS for p in load_prompt_set(ps)[0]]
    registry = ModelRegistry()
    target = registry.get("embedded")
    drafter = drafter_for(method, "head", target, registry)
    curve = cost_curve_for(target, drafter)
    priors = {"new": drafter.calibration_prior, "old": C.load_drafter_tables(previous)}
    cfg = TreeConfig(method=method, budget=128, topk=6, mu=0.1, auto=True)
    dec = DecodeConfig(max_new_tokens=64)
    seconds = dict.fromkeys(("ar", *ARMS), 0.0)
    stats = {a: {"steps": 0, "nodes": 0, "plain": 0, "E": 0.0, "R": 0.0} for a in ARMS}
    per_category: dict[tuple[str, str], list[float]] = {}
    for i, p in enumerate(prompts):
        order = ["ar", *ARMS] if i % 2 == 0 else ["ar", *ARMS][::-1]
        reference = None
        for arm in order:
            if arm == "ar":
                trace = run_to_end(target, None, TreeConfig(method="ar"), dec, p["prompt"], texts=False)
            else:
                drafter.calibration_prior = priors[arm]
                trace = run_to_end(target, drafter, cfg, dec, p["prompt"], texts=False, cost_curve=curve)
                s = stats[arm]
                expected = sum(x.expected for x in trace.steps)
                realised = sum(x.accepted_tokens + 1 for x in trace.steps)
                s["steps"] += len(trace.steps)
                s["nodes"] += sum(len(x.tree) - 1 for x in trace.steps)
                s["plain"] += sum(len(x.tree) == 1 for x in trace.steps)
                s["E"] += expected
                s["R"] += realised
                c = per_category.setdefault((p["category"], arm), [0.0, 0.0])
                c[0] += expected
                c[1] += realised
            seconds[arm] += trace.seconds
            ids = [t for x in trace.steps for t in x.committed_ids]
            reference = reference or ids
            assert ids == reference, (arm, p["id"])  # every arm emits plain decoding's tokens
        print(i, p["id"], {a: round(seconds["ar"] / seconds[a], 3) for a in ARMS}, flush=True)
    for arm in ARMS:
        s = stats[arm]
        print(
            arm,
            "speedup vs ar",
            round(seconds["ar"] / seconds[arm], 3),
            "steps",
            s["steps"],
            "nodes/step",
            round(s["nodes"] / s["steps"], 2),
            "plain",
            round(s["plain"] / s["steps"], 3),
            "E/R",
            round(s["E"] / s["R"] - 1, 3),
        )
    for (category, arm), (e, r) in sorted(per_category.items()):
        print(f"  {category:14s} {arm}: E/R {e / r - 1:+.0%}")


if __name__ == "__main__":
    main(sys.argv[1], *map(Path, sys.argv[2:3]))
