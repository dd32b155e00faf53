"""The Benchmark tab: published results of ``python -m talon.bench --suite`` (no model needed)."""
from __future__ import annotations

import os
from pathlib import Path

import gradio as gr

from talon.bench import results
from viz import bench_charts

ROOT = Path(__file__).resolve().parent.parent
BENCH_DIR_ENV = "TALON_BENCH_DIR"
NO_BENCH = ("No benchmark results yet. Produce them with `python -m talon.bench --suite quick --out-dir "
            "docs/bench/quick` (a few minutes on a CPU) or `--suite paper`; this tab shows the newest directory "
            "under `docs/bench/` (or under `$TALON_BENCH_DIR`).")


def bench_root() -> Path:
    """Where results directories are looked for: ``$TALON_BENCH_DIR`` or ``docs/bench``."""
    return Path(os.environ.get(BENCH_DIR_ENV) or ROOT / "docs" / "bench")


def bench_show(directory):
    """Meta, tables and charts of one results directory (one of ``bench_root()``'s)."""
    dirs = {str(d) for d in results.result_dirs(bench_root())}
    if not directory or str(directory) not in dirs:
        return NO_BENCH, None, None, None, None, None, None, None, None, None
    meta, runs, summary = results.read_results(directory)
    tables, figs = bench_charts.tables(runs, summary), bench_charts.figures(summary)
    return (bench_charts.meta_markdown(meta, str(directory)), tables["methods"], tables["categories"],
            tables["shape"], tables["lossless"], figs["peers"], figs["budget_sweep"], figs["mu_sweep"],
            figs["tree_shape"], tables["sources"])


def bench_load():
    """Page load: the results directories (newest first, selected) and the newest one's view."""
    dirs = results.result_dirs(bench_root())
    choices = [(results.describe(d), str(d)) for d in dirs]
    value = choices[0][1] if choices else None
    return gr.update(choices=choices, value=value), *bench_show(value)
