"""App tier: the Benchmark tab loads the newest results directory (no model run) and switches to another."""

from __future__ import annotations

import json

import pytest
from gradio_client import Client

from tests.bench_fakes import CATEGORIES, write_fake_results

pytestmark = pytest.mark.app


def _value(update):
    """The value of an output the handler sent as ``gr.update(value=..., visible=...)``, or None when hidden."""
    if isinstance(update, dict) and update.get("__type__") == "update":
        return update.get("value") if update.get("visible", True) else None
    return update


def _figure(plot: dict) -> dict:
    return json.loads(plot["plot"])


def test_benchmark_tab_shows_the_newest_results(app_url, tmp_path, monkeypatch):
    write_fake_results(tmp_path / "older", date="2026-01-01T00:00:00+00:00")
    write_fake_results(tmp_path / "newer", date="2026-02-01T00:00:00+00:00")
    monkeypatch.setenv("TALON_BENCH_DIR", str(tmp_path))
    client = Client(app_url, verbose=False)
    dropdown, meta, *views = client.predict(api_name="/bench_load")
    methods, categories, shape, lossless, peers, budget, mu, topk, sweeps, tree_shape, sources, cost, cost_table = map(
        _value, views
    )
    assert dropdown["value"] == str(tmp_path / "newer")
    assert dropdown["info"].startswith("2 results: type part of")  # how to find one
    assert [value for _label, value in dropdown["choices"]] == [str(tmp_path / "newer"), str(tmp_path / "older")]
    assert "2026-02-01" in meta and "python -m talon.bench --suite fake" in meta
    assert str(tmp_path) not in meta  # paths are shown relative, never this machine's absolute path
    assert [row[0] for row in methods["data"]] == [
        "autoregressive",
        "HF generate",
        "HF prompt lookup",
        "HF assisted",
        "TALON, N=16",
    ]
    assert categories["headers"][:3] == ["category", "EAGLE-2, N=16 MAT (T=0)", "EAGLE-2, N=16 speedup (T=0)"]
    assert [row[0] for row in categories["data"]] == [*CATEGORIES, "all"]
    assert shape["data"] and lossless["data"]
    assert sources["headers"][:3] == ["category", "TALON (head), N=16 MAT (T=0)", "TALON (head), N=16 speedup (T=0)"]
    assert {t["name"] for t in _figure(budget)["data"]} == {
        "EAGLE-2",
        "TALON",
        "TALON, auto N: 1.11× the best fixed N (32)",
        "1× = plain decoding",
    }
    assert _figure(peers)["data"][0]["type"] == "bar" and _figure(mu)["data"] and _figure(tree_shape)["data"]
    assert _figure(topk)["data"]
    # the sweeps' points as numbers beside the charts (which N pays on the machine measured)
    assert sweeps["headers"][:5] == ["swept", "method", "setting", "speedup over AR", "× best fixed N"]
    assert ["Budget N", "TALON, auto N", "auto (cap 128)"] == sweeps["data"][6][:3]

    assert cost is None and cost_table is None  # the fake suite has no cost table: its views are hidden

    meta_older, *_ = client.predict(str(tmp_path / "older"), api_name="/bench_show")
    assert "2026-01-01" in meta_older
    with pytest.raises(Exception, match="not in the list of choices"):  # only the listed directories load
        client.predict(str(tmp_path.parent), api_name="/bench_show")


def test_benchmark_tab_without_results_says_how_to_make_them(app_url, tmp_path, monkeypatch):
    monkeypatch.setenv("TALON_BENCH_DIR", str(tmp_path / "none"))
    dropdown, meta, methods, *_ = Client(app_url, verbose=False).predict(api_name="/bench_load")
    assert dropdown["choices"] == [] and dropdown["value"] is None
    assert "python -m talon.bench --suite" in meta


def test_benchmark_tab_prefers_results_from_this_kind_of_device(app_url, tmp_path, monkeypatch):
    write_fake_results(tmp_path / "cpu-run", date="2026-01-01T00:00:00+00:00", device="cpu")
    write_fake_results(tmp_path / "gpu-run", date="2026-03-01T00:00:00+00:00", device="cuda (NVIDIA H100)")
    monkeypatch.setenv("TALON_BENCH_DIR", str(tmp_path))
    dropdown, meta, *_ = Client(app_url, verbose=False).predict(api_name="/bench_load")
    assert dropdown["value"] == str(tmp_path / "cpu-run")  # the app runs on a CPU: the newer GPU run is listed
    assert len(dropdown["choices"]) == 2 and "2026-01-01" in meta


def test_benchmark_tab_opens_on_a_comparison_of_methods_before_a_newer_lone_sweep(app_url, tmp_path, monkeypatch):
    write_fake_results(tmp_path / "methods", date="2026-01-01T00:00:00+00:00", kinds=("methods", "mu_sweep"))
    write_fake_results(tmp_path / "sweep", date="2026-02-01T00:00:00+00:00", kinds=("topk_sweep",))
    monkeypatch.setenv("TALON_BENCH_DIR", str(tmp_path))
    dropdown, meta, *_ = Client(app_url, verbose=False).predict(api_name="/bench_load")
    assert dropdown["value"] == str(tmp_path / "methods")
    assert [value for _label, value in dropdown["choices"]][0] == str(tmp_path / "sweep")  # still listed first


def test_benchmark_tab_prefers_results_in_the_apps_dtype(app_url, tmp_path, monkeypatch):
    """The test app runs in float32: a newer bfloat16 run is listed but a float32 one is shown first."""
    write_fake_results(tmp_path / "fp32-run", date="2026-01-01T00:00:00+00:00", dtype="float32")
    write_fake_results(tmp_path / "bf16-run", date="2026-03-01T00:00:00+00:00", dtype="bfloat16")
    monkeypatch.setenv("TALON_BENCH_DIR", str(tmp_path))
    dropdown, meta, *_ = Client(app_url, verbose=False).predict(api_name="/bench_load")
    assert dropdown["value"] == str(tmp_path / "fp32-run")
    assert [value for _label, value in dropdown["choices"]][0] == str(tmp_path / "bf16-run")
