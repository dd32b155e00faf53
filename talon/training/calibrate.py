"""Fit a drafter's calibration (``talon.drafters.calibration``) on held-out answers and measure it:
``python -m talon.training.calibrate --drafter head --out assets/heads/smollm2-135m-instruct/calibration.json``.

The prompts are the head trainer's held-out split of its prompt pool (never trained on; the same seed
and pool size as the shipped head), decoded greedily with TALON trees; every node the target reached
is one observation (its draft probability, depth, source, and whether it was accepted).  Half the
prompts fit the table, the other half score it: reliability per depth and expected calibration error
(ECE) of the raw probabilities and of the fitted ones, written into the file's metadata.

The pool is synthetic and close to what the head was trained on, so a fit on it alone is optimistic
for the benchmarks' open prompts (on the example prompts it overestimated the expected tokens of N=24
trees by a quarter); ``--extra`` adds prompt files to the fitting half, by default
``CALIBRATION_PROMPTS``: original prompts in the example prompts' categories and MT-Bench's kinds of
question, written for this and in no benchmark suite's prompt set (a test checks).

``--source retrieval`` fits only prompt lookup's drafts, for a drafter merged with it
(``--drafter lookup+head``; TALON trees over the merged proposal, as the hybrid method grows them):
``python -m talon.training.calibrate --drafter lookup+head --source retrieval --out
assets/heads/smollm2-135m-instruct/calibration-lookup.json``.  Decoding loads a head directory's two
files together (``talon.drafters.calibration.load_drafter_tables``).
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from collections.abc import Sequence
from pathlib import Path

from ..bench.prompts import read_prompts
from ..bench.results import claim_out_file
from ..config import ASSETS, ConfigError, DecodeConfig, TreeConfig
from ..drafters.calibration import (
    Calibration,
    Observation,
    expected_calibration_error,
    fit,
    fit_match_prior,
    observations,
    reliability,
    save,
)
from ..drafters.factory import make_drafter
from ..engine.decode import run_to_end
from ..models.loaded import ModelLoadError
from ..models.registry import ModelRegistry
from ..tree import SOURCE_MODEL, SOURCE_RETRIEVAL
from .prompt_pool import build_prompt_pool

CALIBRATION_PROMPTS = ASSETS / "calibration_prompts.jsonl"
"""The default extra fitting prompts (in no suite). Not ``assets/bench_style_prompts.jsonl``: the
paper and sources suites run its prompts, and the headline suite runs its MT-Bench-style ones where
MT-Bench is not installed."""

TREES = (TreeConfig(method="talon", budget=24, topk=6, mu=0.1), TreeConfig(method="talon", budget=60, topk=10, mu=0.03))
"""The trees the observations come from: the CPU default and the paper's (deeper layers)."""


def heldout_prompts(pool_size: int = 1500, heldout: float = 0.1, seed: int = 0) -> list[dict]:
    """The head trainer's held-out prompts (``talon.training.train_head.generate_sequences``' split)."""
    pool = build_prompt_pool(seed=seed, size=pool_size)
    rng = random.Random(seed)
    split = {item["id"]: rng.random() < heldout for item in pool}
    return [item for item in pool if split[item["id"]]]


def collect(
    target, registry, spec: str, prompts: Sequence[dict], max_new_tokens: int, source: str = "all", log=print
) -> list[Observation]:
    """Observations of every reached node of TALON trees (``TREES``) decoding ``prompts``; only the
    nodes drafted by ``source`` (``model`` or ``retrieval``) unless it is ``all``."""
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
            obs += [o for o in observations([(s.tree, s) for s in trace.steps]) if source in ("all", o.source)]
        log(f"{k + 1}/{len(prompts)} prompts, {len(obs)} observations")
    return obs


def report(obs: Sequence[Observation], table: dict | None) -> dict:
    """Reliability rows and ECE of ``obs``: raw, by what a run assumes without a table (``untabled``: the
    raw q for a model's drafts, the match-length prior for prompt lookup's) and (with ``table``) fitted."""
    raw = reliability(obs)
    out = {"observations": len(obs), "ece_raw": expected_calibration_error(raw), "raw": raw}
    calibrations = {"untabled": Calibration()}
    if table is not None:
        calibrations["calibrated"] = Calibration(table)
    for name, cal in calibrations.items():
        rows = reliability(obs, lambda o, cal=cal: cal(o.q, o.depth, o.source, o.match))
        out.update({f"ece_{name}": expected_calibration_error(rows), name: rows})
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m talon.training.calibrate",
        description=__doc__.split("\n\n")[0].replace("``", "`"),  # what it does and the command
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", default="embedded")
    p.add_argument("--drafter", default="head", help="the drafter spec whose confidence is calibrated")
    p.add_argument("--prompts", type=int, default=80, help="held-out prompts used (half fit, half score)")
    p.add_argument("--max-new-tokens", type=int, default=64)
    p.add_argument(
        "--source",
        choices=("all", SOURCE_MODEL, SOURCE_RETRIEVAL),
        default="all",
        help="fit only the drafts of this source (retrieval: prompt lookup's, with --drafter lookup+SPEC)",
    )
    p.add_argument("--out", type=Path, required=True, help="where to write the calibration JSON")
    p.add_argument(
        "--extra",
        type=Path,
        nargs="*",
        default=[CALIBRATION_PROMPTS],
        help="JSONL prompt files added to the fitting half (default: assets/calibration_prompts.jsonl)",
    )
    args = p.parse_args(argv)
    if args.prompts < 2:  # one to fit, one to score
        p.error(f"--prompts must be at least 2 (half fit the table, half score it), not {args.prompts}")
    if args.max_new_tokens < 1:
        p.error(f"--max-new-tokens must be at least 1, not {args.max_new_tokens}")
    try:
        prompts = heldout_prompts()[: args.prompts]
        fit_prompts, score_prompts = prompts[::2], prompts[1::2]
        fit_prompts += [row for path in args.extra for row in read_prompts(path)]  # before any model loads
        claim_out_file(args.out, overwrite=True)  # a folder or a file in the way fails now, not after decoding
        registry = ModelRegistry()
        target = registry.get(args.target)
        make_drafter(args.drafter, target, registry)  # a drafter that does not load fails before any decoding
        fit_obs = collect(target, registry, args.drafter, fit_prompts, args.max_new_tokens, args.source)
        score_obs = collect(target, registry, args.drafter, score_prompts, args.max_new_tokens, args.source)
    except (ConfigError, ModelLoadError, OSError) as err:
        print(f"error: {err}", file=sys.stderr)
        return 2
    if not fit_obs or not score_obs:  # an empty table would read as perfectly calibrated
        print(
            f"error: no {'' if args.source == 'all' else args.source + ' '}drafts were reached "
            f"({len(fit_obs)} to fit, {len(score_obs)} to score): nothing to calibrate"
            + (" (--source retrieval needs a drafter with prompt lookup, lookup+SPEC)" if args.source != "all" else "")
            + "; nothing was written.",
            file=sys.stderr,
        )
        return 1
    table = fit(fit_obs)
    scored = report(score_obs, table)
    meta = {
        "drafter": args.drafter,
        "source": args.source,
        "target": target.name,
        "fit_prompts": len(fit_prompts),
        "extra": [str(path) for path in args.extra],
        "score_prompts": len(score_prompts),
        "trees": [f"N={c.budget}, K={c.topk}, mu={c.mu}" for c in TREES],
        "score": scored,
        "match_prior": fit_match_prior(fit_obs),
        "command": "python -m talon.training.calibrate " + " ".join(sys.argv[1:] if argv is None else argv),
    }
    save(table, args.out, meta)
    print(json.dumps({k: scored[k] for k in ("observations", "ece_raw", "ece_untabled", "ece_calibrated")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
