"""Replay hybrid auto's calibration over the trees ``hybrid_calibration_runs.py`` kept (2026-12-01, session 55).

Per category: the planned expected committed tokens over the realised ones (E / realised - 1, as the
headline's tables give it) with one standard error of that ratio from the steps' residuals (steps taken
as independent, so a lower bound), replaying each run's online calibration exactly as the run did
(checked against the expected tokens the run recorded); then the same trees under other calibrations:
the retrieval and model scales learning faster (``SCALE_STRENGTH``), and retrieval cells split by the
extended match length (1, 2, 3, 4-5, 6-9, 10-19, 20+) instead of 1 / 2 / 3+, refitted on the second file's
runs.  The trees stay as they were (an auto-sized run under another calibration would size them
otherwise), so the variants are an estimate.

    PYTHONPATH=. python docs/bench/xeon-emr-r55/hybrid_calibration_replay.py BENCHMARKED.json FIT.json
"""

from __future__ import annotations

import json
import math
import sys
from collections import defaultdict
from types import SimpleNamespace

import talon.drafters.calibration as cal
from talon.tree import SOURCE_MODEL, SOURCE_RETRIEVAL, DraftTree


def load(path: str, extended: bool) -> list[dict]:
    runs = json.load(open(path))
    for run in runs:
        for s in run["steps"]:
            match = s["ext"] if extended else s["match"]
            n = len(s["parent"])
            s["tree"] = DraftTree(
                token=[0] * n,
                parent=s["parent"],
                depth=s["depth"],
                draft_logprob=s["lp"],
                path_logprob=[0.0] * n,
                source=s["src"],
                match=[m if src == SOURCE_RETRIEVAL else 0 for m, src in zip(match, s["src"])],
            )
            s["verdict"] = SimpleNamespace(accepted_path=s["path"], status=s["status"])
    return runs


def evaluate(runs: list[dict], table: dict, label: str, check: bool = False) -> None:
    cats = defaultdict(list)
    for run in runs:
        calibration = cal.Calibration(table)
        for s in run["steps"]:
            expected = calibration.expected_tokens(s["tree"])
            if check and s["expected"] is not None:
                assert abs(expected - s["expected"]) < 1e-6, "the replay differs from the run"
            cats[run["cat"]].append((expected, s["committed"]))
            calibration.observe(s["tree"], s["verdict"])
    cells = []
    for name, pairs in sorted(cats.items()):
        planned, realised = sum(e for e, _ in pairs), sum(r for _, r in pairs)
        se = math.sqrt(sum((r - e) ** 2 for e, r in pairs)) / realised
        cells.append(f"{name[:7]} {planned / realised - 1:+.3f}" + (f" ±{se:.3f}" if check else ""))
    print(f"{label:34s} " + "  ".join(cells))


def refit(runs: list[dict], base: dict) -> dict:
    obs = cal.observations([(s["tree"], s["verdict"]) for run in runs for s in run["steps"]])
    table = {k: v for k, v in base.items() if k[0] != SOURCE_RETRIEVAL}
    table.update({k: v for k, v in cal.fit(obs).items() if k[0] == SOURCE_RETRIEVAL})
    return table


def extended_cell(q: float, depth: int, source: str, match: int = 0) -> cal.Cell:
    m = match
    bucket = (
        (0 if m <= 0 else m if m <= 3 else 4 if m <= 5 else 5 if m <= 9 else 6 if m <= 19 else 7)
        if source == SOURCE_RETRIEVAL
        else 0
    )
    return source, min(max(depth, 1), cal.MAX_DEPTH_BUCKET), cal.q_bin(q), bucket


def main(benchmarked: str, fitting: str) -> None:
    bench, fit_runs = load(benchmarked, False), load(fitting, False)
    shipped = cal.rows_table(bench[0]["prior"])
    for label, runs in (("benchmarked prompts, shipped", bench), ("fitting prompts, shipped", fit_runs)):
        evaluate(runs, shipped, label, check=True)
    default = cal.SCALE_STRENGTH
    for retrieval, model in ((6, 4), (4, 4), (2, 2)):
        cal.SCALE_STRENGTH = {SOURCE_RETRIEVAL: retrieval, SOURCE_MODEL: model}
        for label, runs in (("benchmarked", bench), ("fitting", fit_runs)):
            evaluate(runs, shipped, f"{label}, scale strengths {retrieval}/{model}")
    cal.SCALE_STRENGTH = default
    evaluate(bench, refit(fit_runs, shipped), "benchmarked, refit 1/2/3+")
    cal.cell = extended_cell
    cal.LOOKUP_PRIOR = {**cal.LOOKUP_PRIOR, 4: 0.9, 5: 0.9, 6: 0.93, 7: 0.95}
    bench_x, fit_x = load(benchmarked, True), load(fitting, True)
    evaluate(bench_x, refit(fit_x, shipped), "benchmarked, refit extended match")


if __name__ == "__main__":
    main(*sys.argv[1:3])
