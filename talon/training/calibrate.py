"""Fit a drafter's calibration (``talon.drafters.calibration``) on held-out answers and measure it:
``python -m talon.training.calibrate --drafter head --out assets/heads/smollm2-135m-instruct/calibration.json``.

The prompts are the head trainer's held-out split of its prompt pool (never trained on; the same seed
and pool size as the shipped head), decoded greedily with TALON trees; every node the target reached
is one observation (its draft probability, depth, source, and whether it was accepted).  Half the
prompts fit the table, the other half score it: reliability per depth and expected calibration error
(ECE) of the raw probabilities and of the fitted ones, written into the file's metadata.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from ..config import DecodeConfig, TreeConfig
from ..drafters.calibration import (
    Calibration,
    Observation,
    expected_calibration_error,
    fit,
    observations,
    reliability,
    save,
)
from ..drafters.factory import make_drafter
from ..engine.decode import run_to_end
from ..models.registry import ModelRegistry
from .prompt_pool import build_prompt_pool

TREES = (TreeConfig(method="talon", budget=24, topk=6, mu=0.1), TreeConfig(method="talon", budget=60, topk=10, mu=0.03))
"""The trees the observations come from: the CPU default and the paper's (deeper layers)."""


def heldout_prompts(pool_size: int = 1500, heldout: float = 0.1, seed: int = 0) -> list[dict]:
    """The head trainer's held-out prompts (``talon.training.train_head.generate_sequences``' split)."""
    pool = build_prompt_pool(seed=seed, size=pool_size)
    rng = random.Random(seed)
    split = {item["id"]: rng.random() < heldout for item in pool}
    return [item for item in pool if split[item["id"]]]


def collect(target, registry, spec: str, prompts: Sequence[dict], max_new_tokens: int, log=print) -> list[Observation]:
    """Observations of every reached node of TALON trees (``TREES``) decoding ``prompts``."""
    obs: list[Observation] = []
    for k, item in enumerate(prompts):
        for cfg in TREES:
            trace = run_to_end(
                target,
                make_drafter(spec, target, registry),
                cfg,
                DecodeConfig(max_new_tokens=max_new_tokens),
                item["prompt"],
                texts=False,
            )
            obs += observations([(s.tree, s) for s in trace.steps])
        log(f"{k + 1}/{len(prompts)} prompts, {len(obs)} observations")
    return obs


def report(obs: Sequence[Observation], table: dict | None) -> dict:
    """Reliability rows and ECE of ``obs``, raw and (with ``table``) calibrated."""
    raw = reliability(obs)
    out = {"observations": len(obs), "ece_raw": expected_calibration_error(raw), "raw": raw}
    if table is not None:
        cal = Calibration(table)
        fitted = reliability(obs, lambda o: cal(o.q, o.depth, o.source, o.match))
        out.update(ece_calibrated=expected_calibration_error(fitted), calibrated=fitted)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m talon.training.calibrate", description=__doc__.splitlines()[0])
    p.add_argument("--target", default="embedded")
    p.add_argument("--drafter", default="head", help="the drafter spec whose confidence is calibrated")
    p.add_argument("--prompts", type=int, default=80, help="held-out prompts used (half fit, half score)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument("--out", type=Path, required=True, help="where to write the calibration JSON")
    args = p.parse_args(argv)
    registry = ModelRegistry()
    target = registry.get(args.target)
    prompts = heldout_prompts()[: args.prompts]
    fit_prompts, score_prompts = prompts[::2], prompts[1::2]
    table = fit(collect(target, registry, args.drafter, fit_prompts, args.max_new_tokens))
    scored = report(collect(target, registry, args.drafter, score_prompts, args.max_new_tokens), table)
    meta = {
        "drafter": args.drafter,
        "target": target.name,
        "fit_prompts": len(fit_prompts),
        "score_prompts": len(score_prompts),
        "trees": [f"N={c.budget}, K={c.topk}, mu={c.mu}" for c in TREES],
        "score": scored,
        "command": "python -m talon.training.calibrate " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    save(table, args.out, meta)
    print(json.dumps({k: scored[k] for k in ("observations", "ece_raw", "ece_calibrated")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
