"""The cost curve measured on the tiny target (fast tier): its shape, the cache next to the model cache,
refreshing it, and auto-sized runs that record their expected tokens, price and stop reasons."""

from __future__ import annotations

import pytest

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.head import HeadDrafter
from talon.engine import cost_measure
from talon.engine.cost_measure import CALL_WIDTHS, VERIFY_SIZES, cost_curve_for, curve_for_run, measure_curve
from talon.engine.decode import new_trace, run_to_end
from talon.trace import RunTrace
from talon.tree import STOP_REASONS
from tests.tiny import prompt_ids, random_head, tiny_target


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("TALON_CACHE_DIR", str(tmp_path))
    return tmp_path


def test_a_measured_curve_covers_every_size_and_width(target):
    lines = []
    curve = measure_curve(target, HeadDrafter(random_head(target), target), reps=2, progress=lines.append)
    assert [n for n, _ in curve.verify] == list(VERIFY_SIZES) and [w for w, _ in curve.call] == list(CALL_WIDTHS)
    assert curve.plain > 0 and all(s > 0 for _, s in curve.verify + curve.call)
    assert curve.price(1, []) == pytest.approx(1.0)
    assert curve.key["drafter"] == "EAGLE-style head" and curve.key["threads"] >= 1
    assert len(lines) == 3 and "cost curve" in lines[0]


def test_curves_are_measured_once_then_read_back_until_refreshed(target, cache, monkeypatch):
    drafter = HeadDrafter(random_head(target), target)
    calls = []
    real = cost_measure.measure_curve

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **{**kwargs, "reps": 1})

    monkeypatch.setattr(cost_measure, "measure_curve", counting)
    assert cost_curve_for(target, drafter, measure=False) is None and not calls
    first = cost_curve_for(target, drafter)
    assert cost_curve_for(target, drafter) == first and len(calls) == 1
    assert list((cache / "cost-curves").glob("*.json"))
    assert cost_curve_for(target, drafter, refresh=True) is not None and len(calls) == 2
    fixed = TreeConfig(method="talon", budget=8)
    assert curve_for_run(target, drafter, fixed) is not None and len(calls) == 2  # read, never measured


def test_an_auto_run_records_why_each_tree_stopped_and_its_price(target, cache):
    drafter = HeadDrafter(random_head(target), target)
    cfg = TreeConfig(method="talon", budget=32, topk=3, mu=0.05, auto=True)
    with pytest.raises(ConfigError, match="cost curve"):
        new_trace(target, drafter, cfg, DecodeConfig(), "", prompt_ids(1))
    curve = measure_curve(target, drafter, reps=1)
    trace = run_to_end(
        target, drafter, cfg, DecodeConfig(max_new_tokens=16), prompt_ids=prompt_ids(1), cost_curve=curve
    )
    assert trace.cost_curve == curve.to_dict()
    for step in trace.steps:
        assert step.stop in STOP_REASONS and step.expected >= 1.0
        assert step.price == pytest.approx(curve.price(len(step.tree), step.call_widths))
    back = RunTrace.from_json(trace.to_json())
    assert [s.stop for s in back.steps] == [s.stop for s in trace.steps] and back.cost_curve == trace.cost_curve
