"""The app reads results measured in its own dtype first: the cost curve its tree lab prices with comes
from a cost suite of its dtype even when one of another dtype is newer (fast tier; real cost suites
copied from docs/bench)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

import ui.shared as shared

BENCH = Path(__file__).resolve().parent.parent / "docs" / "bench"


def copy_cost_suite(name: str, into: Path, date: str) -> float:
    """Copy the cost suite ``docs/bench/NAME`` under ``into``, dated ``date``; returns its plain step (s)."""
    target = into / name
    shutil.copytree(BENCH / name, target)
    meta = json.loads((target / "meta.json").read_text())
    meta["date"] = date
    (target / "meta.json").write_text(json.dumps(meta))
    rows = (target / "cost.csv").read_text().splitlines()
    return float(next(r for r in rows if r.startswith("ar,")).split(",")[3])


@pytest.mark.parametrize("app_dtype", ["float32", "bfloat16"])
def test_the_cost_curve_is_the_newest_of_the_apps_dtype(tmp_path, monkeypatch, app_dtype):
    fp32 = copy_cost_suite("cost-cpu-epyc-zen4-r16", tmp_path, "2026-01-01T00:00:00+00:00")
    bf16 = copy_cost_suite("cost-cpu-epyc-zen4-bf16-invariant", tmp_path, "2026-02-01T00:00:00+00:00")
    monkeypatch.setattr(shared, "APP_DTYPE", app_dtype)
    monkeypatch.setattr(shared, "DEVICE_KIND", "cpu")
    shared._cost_model.cache_clear()
    curve = shared.cost_model(str(tmp_path))
    shared._cost_model.cache_clear()
    assert curve is not None and fp32 != bf16
    assert curve.plain == pytest.approx(fp32 if app_dtype == "float32" else bf16)


def test_a_newer_cost_suite_of_another_device_never_prices_this_ones_trees(tmp_path, monkeypatch):
    # A GPU cost table, newer than the CPU's, sits in the same folder: the CPU app's Tree lab and auto
    # runs must keep the CPU's curve (the GPU's prices a tree at a fraction of what it costs here).
    cpu = copy_cost_suite("cost-cpu-epyc-zen4-r16", tmp_path, "2026-01-01T00:00:00+00:00")
    gpu = copy_cost_suite("cost-cuda-h200-r49", tmp_path, "2026-03-01T00:00:00+00:00")
    monkeypatch.setattr(shared, "APP_DTYPE", "float32")
    monkeypatch.setattr(shared, "DEVICE_KIND", "cpu")
    shared._cost_model.cache_clear()
    try:
        assert cpu != gpu and shared.cost_model(str(tmp_path)).plain == pytest.approx(cpu)
    finally:
        shared._cost_model.cache_clear()


def test_a_plain_step_is_the_median_of_the_steps_after_the_first():
    # The first step warms up (0.5 s here): counted, or the slowest taken, the "machine is busy" note would
    # come up on a quiet machine.
    from types import SimpleNamespace

    run = SimpleNamespace(steps=[SimpleNamespace(step_seconds=s) for s in (0.5, 0.01, 0.01, 0.012)])
    assert shared.plain_step_seconds([run]) == 0.01
    assert shared.plain_step_seconds([SimpleNamespace(steps=run.steps[:1])]) is None


def test_results_without_a_dtype_count_as_float32(monkeypatch):
    monkeypatch.setattr(shared, "APP_DTYPE", "float32")
    assert shared.measured_like_this_app({}) and shared.measured_like_this_app({"dtype": "float32"})
    assert not shared.measured_like_this_app({"dtype": "bfloat16"})


def test_every_tab_reads_results_from_talon_bench_dir(tmp_path, monkeypatch):
    """With ``$TALON_BENCH_DIR`` set, the Tree lab's cost table and its projections come from there, as the
    Benchmark tab's list does (they read docs/bench whatever the variable said)."""
    plain = copy_cost_suite("cost-cpu-epyc-zen4-r16", tmp_path, "2026-01-01T00:00:00+00:00")
    monkeypatch.setenv(shared.BENCH_DIR_ENV, str(tmp_path))
    monkeypatch.setattr(shared, "DEVICE_KIND", "cpu")
    monkeypatch.setattr(shared, "APP_DTYPE", "float32")
    assert shared.bench_root() == tmp_path
    curve = shared.cost_model()
    assert curve is not None and curve.plain == pytest.approx(plain)
    assert list(shared.measured_curves()) == ["cost-cpu-epyc-zen4-r16"]
    monkeypatch.delenv(shared.BENCH_DIR_ENV)
    assert len(shared.measured_curves()) >= 3 and shared.bench_root() == BENCH
