"""The Benchmark tab: published results of ``python -m talon.bench --suite`` (no model needed).  It
opens on the newest results measured on the kind of device the app runs on, shows paths relative to the
project, and hides the charts and tables a results directory has no data for."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr

from talon.bench import results
from talon.bench.suites import COST_SUITE
from viz import bench_charts
from viz.summary import plural

from .shared import DEVICE_KIND, bench_root, measured_like_this_app, shown_path

NO_BENCH = (
    "No benchmark results yet. Produce them with `python -m talon.bench --suite quick --out-dir "
    "docs/bench/quick` (a few minutes on a CPU) or `--suite paper`; this tab opens on the newest comparison "
    "of methods under `docs/bench/` (or under `$TALON_BENCH_DIR`) from this kind of device, in this app's dtype."
)
COLUMN_WIDTHS = {"methods": bench_charts.METHODS_WIDTHS, "shape": bench_charts.SHAPE_WIDTHS}
"""Column widths of the tables whose columns are fixed (``gr.Dataframe(column_widths=...)``)."""
VIEWS = (
    "methods",
    "categories",
    "shape",
    "lossless",
    "peers",
    "budget_sweep",
    "mu_sweep",
    "topk_sweep",
    "sweeps",
    "tree_shape",
    "sources",
    "cost",
    "cost_table",
)
"""The tab's outputs after the Markdown, in order."""


def _meta(directory: Path) -> dict:
    try:
        return json.loads((directory / results.META).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}


def _has_methods_table(meta: dict) -> bool:
    """Whether a results directory (its ``meta.json``) compared methods (a ``methods`` experiment), the
    table a visitor looks for first; the cost suite never does, and any other meta.json that does not
    list its experiments counts as yes."""
    if meta.get("suite") == COST_SUITE:
        return False
    experiments = meta.get("experiments")
    return experiments is None or any(isinstance(e, dict) and e.get("kind") == "methods" for e in experiments)


def _shown(value, has_data: bool):
    return gr.update(value=value, visible=has_data)


def bench_show(directory):
    """Meta, tables and charts of one results directory (one of ``bench_root()``'s); views without
    data are hidden."""
    dirs = {str(d) for d in results.result_dirs(bench_root())}
    if not directory or str(directory) not in dirs:
        return (NO_BENCH, *(gr.update(value=None, visible=False) for _ in VIEWS))
    meta, runs, summary = results.read_results(directory)
    cost = results.read_cost(directory)
    tables, figs = bench_charts.tables(runs, summary), bench_charts.figures(summary, cost=cost)
    has_fig = bench_charts.has_data(summary, cost)
    views = {
        **{name: _shown(t, not t.empty) for name, t in tables.items()},
        **{name: _shown(f, has_fig[name]) for name, f in figs.items()},
    }
    cost_table = bench_charts.cost_table(cost)
    views["cost_table"] = _shown(cost_table, not cost_table.empty)
    return (bench_charts.meta_markdown(meta, shown_path(directory)), *(views[name] for name in VIEWS))


def bench_load():
    """Page load: the results directories (newest first) and the view of the newest one measured on
    this kind of device, in the app's dtype where there is one, preferring one that compares methods
    over a lone sweep or cost table; a line says when there is none from this device and what is shown
    instead."""
    dirs = results.result_dirs(bench_root())
    choices = [(results.describe(d, name), str(d)) for d, name in zip(dirs, results.dir_names(dirs, bench_root()))]
    metas = {d: _meta(d) for d in dirs}
    local = [d for d in dirs if str(metas[d].get("device", "")).startswith(DEVICE_KIND)]
    pool = [d for d in local if measured_like_this_app(metas[d])] or local or dirs
    shown = next((d for d in pool if _has_methods_table(metas[d])), pool[0] if pool else None)
    value = str(shown) if shown else None
    meta, *views = bench_show(value)
    if dirs and not local:
        meta = (
            f"*No results measured on a {DEVICE_KIND.upper()} yet: showing the newest from another device. "
            "Timings and speedups depend on the device.*\n\n" + meta
        )
    return gr.update(choices=choices, value=value, info=directory_info(len(dirs))), meta, *views


def directory_info(count: int) -> str:
    """What the results menu holds and how to find one in it (a long list read as all there was)."""
    return (
        f"{plural(count, 'result')}: type part of a folder, suite or device to find one (cuda, cost, headline, epyc)."
    )
