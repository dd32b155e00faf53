"""Benchmark results on disk: the run and summary schemas, the per-experiment aggregation, and reading
and writing a results directory (``runs.csv``, ``summary.csv``, ``meta.json``).

Torch-free, so the app can show results without loading a model.  A results directory is what
``python -m talon.bench --suite NAME --out-dir DIR`` writes; ``docs/bench/`` holds the published ones.
"""

from __future__ import annotations

import json
import math
import tempfile
from collections.abc import Sequence
from pathlib import Path

import pandas as pd

from .. import metrics
from ..config import ConfigError
from ..files import file_in_the_way, write_text_atomically
from .suites import AUTO_SUFFIX, is_auto

RUN_COLUMNS = (
    "suite",
    "experiment",
    "kind",
    "sweep",
    "setting",
    "temperature",
    "seed",
    "prompt_id",
    "category",
    "source",
    "method",
    "drafter",
    "budget",
    "topk",
    "mu",
    "depth",
    "gamma",
    "auto",
    "max_new_tokens",
    "prompt_tokens",
    "new_tokens",
    "target_forwards",
    "draft_forwards",
    "seconds",
    "step_seconds",
    "draft_seconds",
    "ar_seconds",
    "hf_seconds",
    "MAT",
    "delta",
    "tokens_per_s",
    "speedup",
    "speedup_hf",
    "draft_share",
    "mean_depth",
    "mean_tree_nodes",
    "mean_layer_widths",
    "mean_expected",
    "mean_realised",
    "mean_sq_miss",
    "mean_price",
    "plain_share",
    "matches_ar",
    "stop_reason",
    "text",
    "token_ids",
)
"""``runs.csv``: one row per measured run (warm-ups are not recorded).  ``budget`` .. ``gamma`` are
empty for ``ar`` and the transformers peers (no tree); the tree-shape columns are empty for the peers
(not observable).  ``ar_seconds``: the autoregressive run's seconds on the same prompt, temperature and
experiment; ``speedup`` = ``ar_seconds / seconds``; ``hf_seconds`` / ``speedup_hf`` the same against
transformers' ``generate()`` on an unmodified model (when the experiment runs ``hf_generate``).
``auto``: the tree was sized by the cost rule (``budget`` its cap); ``mean_expected`` / ``mean_price``:
per step, the expected committed tokens (bonus included) and the price in plain steps (empty without a
cost curve); ``mean_realised``: per step, the drafts accepted + 1 (what ``mean_expected`` predicts);
``mean_sq_miss``: per step, the squared difference of the two (what the calibration's error bar needs);
``plain_share``: share of steps whose tree was the root alone.  ``matches_ar``: output tokens equal AR's
(at T>0 too for our methods, which draw AR's sample of the same seed; empty for transformers' peers at T>0).
``mean_layer_widths`` and ``token_ids`` are JSON lists."""

GROUP_KEYS = (
    "suite",
    "experiment",
    "kind",
    "sweep",
    "setting",
    "temperature",
    "method",
    "drafter",
    "budget",
    "topk",
    "mu",
    "depth",
    "gamma",
    "auto",
)
SUMMARY_COLUMNS = GROUP_KEYS + (
    "category",
    "prompts",
    "new_tokens",
    "target_forwards",
    "seconds",
    "ar_seconds",
    "hf_seconds",
    "MAT",
    "delta",
    "tokens_per_s",
    "speedup",
    "speedup_hf",
    "draft_share",
    "mean_depth",
    "mean_tree_nodes",
    "mean_layer_widths",
    "mean_expected",
    "mean_realised",
    "calibration_se",
    "mean_price",
    "plain_share",
    "matches_ar",
)
"""``summary.csv``: one row per (experiment, setting, temperature, method) and category, plus
``category == "all"`` pooling every prompt.  Ratios are of sums over the prompts (``metrics.pooled``);
``speedup`` = summed AR seconds / summed method seconds over the same prompts; ``matches_ar`` = share
of runs whose tokens equal AR's (empty where the runs were not checked: a peer sampling).
``calibration_se``: the standard error of ``mean_expected / mean_realised - 1`` from the spread of the
per-step misses (``calibration_se``'s docstring): how far from 0 a calibrated drafter's miss may land by
chance on these steps."""

ALL = "all"
LIST_COLUMNS = ("mean_layer_widths", "token_ids")
META = "meta.json"
COST = "cost.csv"
COST_COLUMNS = ("component", "size", "lm_head_rows", "seconds", "ratio", "reps", "prefix_tokens")
"""``cost.csv`` (``python -m talon.bench --suite cost``): one row per measured piece of a step:
``component`` ``ar`` (one autoregressive step), ``target`` (verifying a tree of ``size`` nodes, root
included, with the LM head on ``lm_head_rows`` rows), ``head`` (a step's second drafter call, over a
frontier of ``size`` nodes), ``head_later`` (a later call of the same step), ``first_call``,
``bookkeeping`` or ``builder`` (``talon.bench.cost``); ``seconds`` the median wall clock; ``ratio`` =
seconds / the ``ar`` row's."""


def _missing(value) -> bool:
    return value is None or (isinstance(value, float) and math.isnan(value))


def _pool(rows: Sequence[dict]) -> dict:
    """``metrics.pooled`` over rows whose tree-shape columns may be missing (then missing in the result)."""
    shape_known = all(not _missing(r.get("mean_depth")) for r in rows)
    clean = [
        {
            k: v
            for k, v in r.items()
            if not (k in ("mean_depth", "mean_tree_nodes", "mean_layer_widths") and _missing(v))
        }
        for r in rows
    ]
    out = metrics.pooled(clean)
    if not shape_known:
        out.update(mean_depth=None, mean_tree_nodes=None, mean_layer_widths=None)
    for base, ratio in (("ar_seconds", "speedup"), ("hf_seconds", "speedup_hf")):
        values = [r.get(base) for r in rows]
        out[base] = None if any(_missing(a) for a in values) else sum(values)
        out[ratio] = None if out[base] is None else metrics.speedup(out[base], out["seconds"])
    for key in ("mean_expected", "mean_realised", "mean_sq_miss", "mean_price", "plain_share"):  # per step
        have = [(r[key], r["target_forwards"]) for r in rows if not _missing(r.get(key))]
        n = sum(f for _, f in have)
        out[key] = sum(v * f for v, f in have) / n if n and len(have) == len(rows) else None
    out["calibration_se"] = calibration_se(
        out["mean_expected"], out["mean_realised"], out.pop("mean_sq_miss"), out["target_forwards"]
    )
    same = [r.get("matches_ar") for r in rows]
    out["matches_ar"] = None if any(_missing(s) for s in same) else sum(bool(s) for s in same) / len(same)
    return out


def calibration_se(
    mean_expected: float | None, mean_realised: float | None, mean_sq_miss: float | None, steps: int
) -> float | None:
    """The standard error of ``mean_expected / mean_realised - 1`` over ``steps`` steps, from the
    per-step misses ``e = expected - realised`` (mean ``mean_expected - mean_realised``, mean square
    ``mean_sq_miss``): ``sd(e) / sqrt(steps) / mean_realised``.  It treats the steps as independent;
    steps of one prompt are not (a prompt the drafter suits less than average misses on most of its
    steps), so it is a lower bound on the uncertainty.  None when a mean is missing or steps < 2."""
    if None in (mean_expected, mean_realised, mean_sq_miss) or steps < 2 or not mean_realised:
        return None
    mean_miss = mean_expected - mean_realised
    variance = max(mean_sq_miss - mean_miss**2, 0.0) * steps / (steps - 1)
    return math.sqrt(variance / steps) / mean_realised


def summarize(rows: Sequence[dict]) -> list[dict]:
    """Summary rows (``SUMMARY_COLUMNS``) of run rows (``RUN_COLUMNS``): per group of ``GROUP_KEYS``,
    one row per category and one for ``ALL``, in first-seen order."""
    groups: dict[tuple, list[dict]] = {}
    for r in rows:
        groups.setdefault(tuple(r.get(k) for k in GROUP_KEYS), []).append(r)
    out = []
    for key, rs in groups.items():
        cats: dict[str, list[dict]] = {}
        for r in rs:
            cats.setdefault(r["category"], []).append(r)
        for category, members in [(ALL, rs), *cats.items()]:
            pooled = _pool(members)
            out.append(
                {
                    **dict(zip(GROUP_KEYS, key)),
                    "category": category,
                    **{c: pooled.get(c) for c in SUMMARY_COLUMNS if c in pooled},
                }
            )
    return [{c: r.get(c) for c in SUMMARY_COLUMNS} for r in out]


def auto_against_fixed(runs: Sequence[dict]) -> list[dict]:
    """The auto-sized tree against the best fixed N, per budget sweep that carries both
    (``METHOD+auto`` beside ``METHOD`` at several N, interleaved per prompt), per temperature.

    ``runs``: run rows (``RUN_COLUMNS``).  The best fixed N is the one with the least summed seconds
    over the prompts every setting ran (picked on the same runs it is compared with, which favours it
    when the sizes are close); ``ratio`` = its seconds / auto's (> 1: auto is faster);
    ``per_prompt``: the geometric mean of the per-prompt ratios, with their least and greatest and
    how many prompts auto ran faster on.  Returns one dict per auto method, in first-seen order."""
    sweeps: dict[tuple, list[dict]] = {}
    for r in runs:
        if r.get("sweep") == "budget" and r.get("method") != "ar":
            sweeps.setdefault((r["experiment"], r["temperature"]), []).append(r)
    out = []
    for (experiment, temperature), rows in sweeps.items():
        for auto in dict.fromkeys(r["method"] for r in rows if is_auto(r["method"])):
            fixed = auto.removesuffix(AUTO_SUFFIX)
            mine = {r["prompt_id"]: r["seconds"] for r in rows if r["method"] == auto}
            seconds: dict[str, dict[str, float]] = {}  # fixed N's setting -> prompt -> seconds
            for r in rows:
                if r["method"] == fixed:
                    seconds.setdefault(r["setting"], {})[r["prompt_id"]] = r["seconds"]
            prompts = [p for p in mine if all(p in by for by in seconds.values())]
            if len({r["setting"] for r in rows if r["method"] == auto}) != 1 or not seconds or not prompts:
                continue  # auto swept with the cap (results written before auto ran once a sweep)
            total = {s: sum(by[p] for p in prompts) for s, by in seconds.items()}
            best = min(total, key=total.get)
            auto_total = sum(mine[p] for p in prompts)
            ratios = [seconds[best][p] / mine[p] for p in prompts]
            ar = sum(r["ar_seconds"] for r in rows if r["method"] == auto and r["prompt_id"] in prompts)
            out.append(
                {
                    "experiment": experiment,
                    "temperature": temperature,
                    "method": auto,
                    "best_fixed": best,
                    "prompts": len(prompts),
                    "ratio": total[best] / auto_total,
                    "speedup": metrics.speedup(ar, auto_total),
                    "best_fixed_speedup": metrics.speedup(ar, total[best]),
                    "per_prompt": math.exp(sum(map(math.log, ratios)) / len(ratios)),
                    "per_prompt_min": min(ratios),
                    "per_prompt_max": max(ratios),
                    "auto_faster": sum(x > 1 for x in ratios),
                    "fixed_ratio": {s: t / auto_total for s, t in total.items()},
                }
            )
    return out


def describe_auto_against_fixed(comparison: dict) -> str:
    """One line for ``auto_against_fixed``'s dict."""
    c = comparison
    return (
        f"{c['method']} vs the best fixed N ({c['best_fixed']}), {c['experiment']} T={c['temperature']:g}: "
        f"{c['ratio']:.2f}x (auto {c['speedup']:.2f}x ar, {c['best_fixed']} {c['best_fixed_speedup']:.2f}x ar; "
        f"per prompt {c['per_prompt']:.2f}x geometric mean, {c['per_prompt_min']:.2f}-{c['per_prompt_max']:.2f}, "
        f"auto faster on {c['auto_faster']} of {c['prompts']})"
    )


# ---- files ------------------------------------------------------------------------------------------
def _frame(rows: Sequence[dict], columns: Sequence[str]) -> pd.DataFrame:
    df = pd.DataFrame([{c: r.get(c) for c in columns} for r in rows], columns=list(columns))
    for c in LIST_COLUMNS:
        if c in df:
            df[c] = [None if _missing(v) else json.dumps(v) for v in df[c]]
    return df


def write_tables(out_dir: Path, runs: Sequence[dict], summary: Sequence[dict] | None = None) -> list[Path]:
    """Write ``runs.csv``, then ``summary.csv`` (``summarize(runs)`` when ``summary`` is None, so the runs
    are on disk before anything is computed from them) into ``out_dir``, each atomically (a checkpoint cut
    short keeps the last one whole); returns the paths."""
    runs_path = write_text_atomically(out_dir / "runs.csv", _frame(runs, RUN_COLUMNS).to_csv(index=False))
    rows = _frame(summarize(runs) if summary is None else summary, SUMMARY_COLUMNS)
    return [runs_path, write_text_atomically(out_dir / "summary.csv", rows.to_csv(index=False))]


def write_meta(out_dir: Path, meta: dict) -> Path:
    return write_text_atomically(out_dir / META, json.dumps(meta, indent=1, ensure_ascii=False, default=str))


def _parse_lists(df: pd.DataFrame) -> pd.DataFrame:
    for c in LIST_COLUMNS:
        if c in df:
            df[c] = [json.loads(v) if isinstance(v, str) and v else None for v in df[c]]
    return df


RESULT_FILES = ("runs.csv", "summary.csv", META, COST)
"""What a suite or the cost suite writes into its directory (``viz.bench_plots`` adds charts, named in
``meta.json``'s ``files``)."""


def claim_out_dir(out_dir: Path, overwrite: bool = False) -> Path:
    """Make ``out_dir`` ready for a run's files before anything is measured: created if missing and
    checked writable; ``ConfigError`` when it is a file, or when it already holds results and
    ``overwrite`` is False (a new run must not replace another's runs at its first checkpoint).  With
    ``overwrite`` the earlier run's files stay until the new run writes its first results
    (``clear_earlier``): a run that fails to load its models leaves them as they were."""
    out_dir = Path(out_dir)
    if out_dir.exists() and not out_dir.is_dir():
        raise ConfigError(f"--out-dir {out_dir} is a file: name a directory.")
    earlier = _earlier_results(out_dir)
    if earlier and not overwrite:
        raise ConfigError(
            f"{out_dir} already holds results ({', '.join(earlier)}): choose a new --out-dir, or pass "
            "--overwrite to replace them."
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    check_writable(out_dir)
    return out_dir


def drop_if_unused(out_dir: Path, existed: bool) -> None:
    """Remove ``out_dir`` when this run made it (``existed`` False) and failed before writing into it, so
    that a failed load leaves no empty folder behind (an existing or non-empty folder stays)."""
    if not existed:
        try:
            Path(out_dir).rmdir()  # only an empty folder goes
        except OSError:
            pass


def _earlier_results(out_dir: Path) -> list[str]:
    return [name for name in RESULT_FILES if (out_dir / name).is_file()]


def clear_earlier(out_dir: Path) -> None:
    """Remove an earlier run's files from ``out_dir`` (``RESULT_FILES`` and the charts its ``meta.json``
    names, nothing else), so that no stale chart or ``cost.csv`` is read as the new run's: called as the
    new run writes its first results into a folder ``claim_out_dir`` let it overwrite."""
    for name in _written_files(out_dir) if _earlier_results(out_dir) else ():
        (out_dir / name).unlink(missing_ok=True)


def _written_files(out_dir: Path) -> set[str]:
    """``RESULT_FILES`` and the plain file names an earlier ``meta.json`` lists (nothing outside the folder)."""
    try:
        listed = json.loads((out_dir / META).read_text(encoding="utf-8")).get("files", [])
    except (OSError, ValueError, AttributeError):
        listed = []
    return set(RESULT_FILES) | {
        n for n in listed if isinstance(n, str) and n == Path(n).name and n not in ("", ".", "..")
    }


def claim_out_file(path: Path, overwrite: bool = False) -> Path:
    """``claim_out_dir`` for one results file (the method-list mode's ``--out``): ``ConfigError`` when it
    is a directory, or exists and ``overwrite`` is False; its folder created and checked writable."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"--out {path} is a directory: name a file, e.g. {path / 'results.json'}.")
    if path.exists() and not overwrite:
        raise ConfigError(f"{path} already exists: choose a new --out, or pass --overwrite to replace it.")
    blocking = file_in_the_way(path.parent)
    if blocking is not None:
        raise ConfigError(f"--out {path}: {blocking} is a file, not a folder: name a file in a folder.")
    path.parent.mkdir(parents=True, exist_ok=True)
    check_writable(path.parent)
    return path


def check_writable(folder: Path) -> None:
    """``OSError`` now, rather than after a benchmark's first prompt, when ``folder`` cannot take a file."""
    with tempfile.NamedTemporaryFile(dir=folder, prefix=".talon-write-check."):
        pass


def write_cost(out_dir: Path, rows: Sequence[dict]) -> Path:
    """Write ``cost.csv`` into ``out_dir``; returns its path."""
    return write_text_atomically(out_dir / COST, _frame(rows, COST_COLUMNS).to_csv(index=False))


def read_cost(directory: str | Path) -> pd.DataFrame:
    """The cost rows of a results directory (an empty frame with ``COST_COLUMNS`` when it has none)."""
    path = Path(directory) / COST
    return pd.read_csv(path) if path.is_file() else pd.DataFrame(columns=list(COST_COLUMNS))


def read_meta(directory: str | Path) -> dict:
    """A results directory's ``meta.json`` (an empty dict when it has none)."""
    path = Path(directory) / META
    return json.loads(path.read_text(encoding="utf-8")) if path.is_file() else {}


def read_results(directory: str | Path) -> tuple[dict, pd.DataFrame, pd.DataFrame]:
    """``(meta, runs, summary)`` of a results directory; list columns parsed back from JSON.  A missing
    file gives an empty dict / frame with the schema's columns."""
    d = Path(directory)
    meta = read_meta(d)
    frames = []
    for name, columns in (("runs.csv", RUN_COLUMNS), ("summary.csv", SUMMARY_COLUMNS)):
        path = d / name
        df = pd.read_csv(path, keep_default_na=True) if path.is_file() else pd.DataFrame(columns=list(columns))
        frames.append(_parse_lists(df))
    return meta, frames[0], frames[1]


def result_dirs(root: str | Path) -> list[Path]:
    """Results directories under ``root`` (``root`` itself included), newest ``meta.json`` date first
    (a meta without a date sorts last)."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = sorted({p.parent for p in root.rglob(META)})

    def date(p: Path) -> str:
        try:
            return str(json.loads((p / META).read_text(encoding="utf-8")).get("date", ""))
        except (OSError, ValueError):
            return ""

    return sorted(found, key=date, reverse=True)


def dir_names(dirs: Sequence[Path], root: str | Path) -> list[str]:
    """What tells ``dirs`` (under ``root``) apart: each one's path below ``root`` (``epyc-avx2-r36/cost-auto-a``:
    the folder names the machine or the run, and a sibling named alone read as from nowhere), or its full
    path where it is not below ``root``."""

    def name(d: Path) -> str:
        try:
            return d.relative_to(root).as_posix()
        except ValueError:
            return str(d)

    return [name(d) for d in dirs]


def ran_part(meta: dict) -> list[str]:
    """The experiments a suite run was limited to with ``--experiments`` (empty: it ran whole)."""
    if "--experiments" not in str(meta.get("command", "")):
        return []
    return [str(e["name"]) for e in meta.get("experiments") or [] if isinstance(e, dict) and e.get("name")]


def describe(directory: str | Path, name: str | None = None) -> str:
    """A one-line label for a results directory: its ``name`` (default: the directory's own), suite (with
    the experiments run where a part of it ran), date, device, and the dtype where it is not float32."""
    d = Path(directory)
    try:
        meta = json.loads((d / META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        meta = {}
    suite = str(meta.get("suite", "?"))
    part = ran_part(meta)
    parts = [name or d.name, f"{suite}: {', '.join(part)}" if part else suite]
    parts += [str(meta.get("date", "?"))[:16].replace("T", " "), meta.get("device", "?")]
    parts += [meta["dtype"]] if meta.get("dtype") not in (None, "float32") else []
    return " · ".join(str(p) for p in parts)
