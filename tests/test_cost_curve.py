"""The cost curve measured on the tiny target (fast tier): its shape, the cache next to the model cache,
refreshing it, and auto-sized runs that record their expected tokens, price and stop reasons."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest
import torch

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.head import HeadDrafter
from talon.engine import cost_measure
from talon.engine.cost_measure import (
    CALL_WIDTHS,
    VERIFY_SIZES,
    cost_curve_for,
    curve_for_run,
    heap_tree,
    measure_curve,
)
from talon.engine.decode import new_trace, run_to_end
from talon.engine.verify import LEAF_HEAD_PROB, LEAVES_WITH_INTERNAL, Verifier, logit_nodes
from talon.runtime.cost_curve import CostCurve
from talon.trace import RunTrace
from talon.tree import STOP_REASONS
from tests.other_work import others_took
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
    assert [w for w, _ in curve.later] == list(CALL_WIDTHS)  # a call after another of the same step
    assert curve.plain > 0 and all(s > 0 for _, s in curve.verify + curve.call + curve.later)
    assert curve.price(1, []) == pytest.approx(1.0)
    assert curve.root > 0 and curve.observe > 0  # the step's first call and a drafted step's bookkeeping
    assert 0 < curve.builder < curve.plain  # the builder's own work per call
    assert curve.key["drafter"] == "EAGLE-style head" and curve.key["threads"] >= 1
    assert len(lines) == 5 and "preparing" in lines[0] and "round 1 of 3" in lines[1] and "builder" in lines[-1]


@pytest.fixture
def measured(monkeypatch) -> list:
    """One entry per curve measured (one round each, to be quick), with this process's memory of curves
    and locks fresh."""
    calls = []
    real = cost_measure.measure_curve

    def counting(*args, **kwargs):
        calls.append(1)
        return real(*args, **{**kwargs, "reps": 1})

    monkeypatch.setattr(cost_measure, "measure_curve", counting)
    monkeypatch.setattr(cost_measure, "_MEASURING", cost_measure._Measuring())
    return calls


def test_curves_are_measured_once_then_read_back_until_refreshed(target, cache, measured):
    drafter = HeadDrafter(random_head(target), target)
    calls = measured
    assert cost_curve_for(target, drafter, measure=False) is None and not calls
    first = cost_curve_for(target, drafter)
    assert cost_curve_for(target, drafter) == first and len(calls) == 1
    assert list((cache / "cost-curves").glob("*.json"))
    assert cost_curve_for(target, drafter, refresh=True) is not None and len(calls) == 2
    fixed = TreeConfig(method="talon", budget=8)
    assert curve_for_run(target, drafter, fixed) is not None and len(calls) == 2  # read, never measured


@pytest.mark.parametrize(("share", "replaced"), [(0.02, True), (0.4, False), (None, True)])
def test_a_curve_measured_again_on_a_busy_machine_does_not_replace_the_cached_one(
    target, cache, measured, monkeypatch, share, replaced
):
    """Measured again while other processes took 40 % of the CPU: returned (the lab draws it) with the note
    ``NOT_KEPT``, and runs keep the curve cached before; quiet, or where it cannot be told (no ``/proc``),
    it replaces it.  The share is kept in the curve either way."""
    drafter = HeadDrafter(random_head(target), target)
    monkeypatch.setattr(cost_measure, "OtherWork", others_took(0.01))
    first = cost_curve_for(target, drafter)
    assert first.other_share == 0.01 and not first.busy
    monkeypatch.setattr(cost_measure, "OtherWork", others_took(share))
    lines = []
    again = cost_curve_for(target, drafter, refresh=True, progress=lines.append)
    assert again.other_share == share and again.busy is (not replaced) and len(measured) == 2
    assert (again.note == cost_measure.NOT_KEPT) is (not replaced)
    assert any("not kept" in line for line in lines) is (not replaced)
    cached = curve_for_run(target, drafter, TreeConfig(method="talon", budget=8, auto=True))
    assert cached.measured == (again if replaced else first).measured and cached.note != cost_measure.NOT_KEPT
    assert len(measured) == 2


def test_a_busy_measurement_does_not_replace_the_curve_a_process_keeps_where_none_could_be_cached(
    target, cache, measured, monkeypatch
):
    (cache / "cost-curves").write_text("a file where the folder should be")
    drafter = HeadDrafter(random_head(target), target)
    monkeypatch.setattr(cost_measure, "OtherWork", others_took(0.01))
    first = cost_curve_for(target, drafter)
    monkeypatch.setattr(cost_measure, "OtherWork", others_took(0.4))
    assert cost_curve_for(target, drafter, refresh=True).note == cost_measure.NOT_KEPT
    assert cost_curve_for(target, drafter) is first and len(measured) == 2


def test_a_stored_share_reads_back_and_a_foreign_one_is_unknown():
    curve = CostCurve(plain=0.02, verify=((1, 0.02), (8, 0.03)), other_share=0.25)
    assert CostCurve.from_dict(curve.to_dict()) == curve and curve.busy
    for foreign in ("x", -0.1, 1.5, None):
        assert CostCurve.from_dict({**curve.to_dict(), "other_share": foreign}).other_share is None
    old = curve.to_dict()
    del old["other_share"]  # a curve cached before shares were recorded
    assert CostCurve.from_dict(old).other_share is None and not CostCurve.from_dict(old).busy


def test_a_curve_that_cannot_be_cached_is_kept_not_lost(target, cache, measured):
    """A cache folder that cannot take the file (read-only, or a file in its place) must not throw away
    the curve just measured, nor make every later run measure again."""
    (cache / "cost-curves").write_text("a file where the folder should be")
    calls, lines = measured, []
    drafter = HeadDrafter(random_head(target), target)
    first = cost_curve_for(target, drafter, progress=lines.append)
    assert first is not None and any("not cached" in line for line in lines)
    assert cost_curve_for(target, drafter) is first and len(calls) == 1  # kept for the process


def test_two_runs_needing_one_uncached_curve_measure_it_once(target, cache, measured):
    """Two users' runs in one process asking for the same missing curve: one measures, the other waits
    for it and reads it (measured side by side on the same cores, both would be wrong)."""
    import threading

    calls = measured
    drafter = HeadDrafter(random_head(target), target)
    got = []
    threads = [threading.Thread(target=lambda: got.append(cost_curve_for(target, drafter))) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(calls) == 1 and len(got) == 2 and got[0] == got[1]


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


def test_an_eagle2_run_prices_its_steps_with_its_own_builders_work(target, cache):
    """A curve's ``builders`` price each method's builder apart: an EAGLE-2 run's steps carry EAGLE-2's
    builder work per call, a TALON run's the default (here a tenth of a plain step against none)."""
    drafter = HeadDrafter(random_head(target), target)
    curve = replace(measure_curve(target, drafter, reps=1), builder=0.0)
    curve = replace(curve, builders=(("eagle2", curve.plain / 10),))
    for method, builder in (("eagle2", curve.plain / 10), ("talon", 0.0)):
        cfg = TreeConfig(method=method, budget=16, topk=3, mu=0.05, auto=True)
        trace = run_to_end(
            target, drafter, cfg, DecodeConfig(max_new_tokens=12), prompt_ids=prompt_ids(2), cost_curve=curve
        )
        drafted = [step for step in trace.steps if step.call_widths]
        assert drafted
        for step in drafted:
            own = replace(curve, builder=builder, builders=())
            assert step.price == pytest.approx(own.price(len(step.tree), step.call_widths)), method


def test_the_measured_trees_walk_the_targets_own_chain_down_to_a_leaf(target):
    ids = prompt_ids(3)
    greedy = run_to_end(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=3), prompt_ids=ids)
    chain = [s.committed_ids[0] for s in greedy.steps]
    tree = heap_tree(ids[-1], 8, ids, chain)
    assert [tree.token[n] for n in (1, 3, 7)] == chain and not tree.children(7)
    with torch.inference_mode():
        verifier = Verifier(target)
        verifier.prefill(ids)
        assert verifier.verify(tree, 0.0).accepted_path == [0, 1, 3, 7]


def test_a_measured_trees_chain_leaf_is_headed_so_its_walk_takes_one_lm_head_call():
    tree = heap_tree(0, 32, [5, 6, 7], chain=[1, 2, 3, 4, 5])
    leaves = [i for i, kids in enumerate(tree.children_lists()) if not kids]
    assert len(leaves) > LEAVES_WITH_INTERNAL and 31 in leaves  # node 31 ends the chain 1, 3, 7, 15, 31
    headed = logit_nodes(tree)
    assert 31 in headed and len(headed) < len(tree)
    assert heap_tree(0, 32, [5, 6, 7]).path_logprob[31] < math.log(LEAF_HEAD_PROB)  # no chain: not headed


class _SpikyPieces:
    """Stand-in step pieces with known costs (plain 1, verify(n) = 1 + n / 10 except a dip at 4, as a CPU
    kernel's blocking gives, call(w) = w / 100, later(w) = w / 200), all scaled by a load that changes after every other
    plain step, with one piece spiking in one round."""

    spiked = False

    def __init__(self, target, drafter, ids, sizes, widths) -> None:
        self.widths, self.load, self.timed, self.drafter = widths, 1.0, 0, drafter
        self.calls: dict[tuple[str, int], int] = {}
        _SpikyPieces.spiked = False

    def plain_step(self) -> float:
        self.timed += 1
        if self.timed % 2:  # the load changes (a piece is timed right after its plain step)
            self.load = 1.0 + 0.7 * (self.timed % 3)
        return self.load

    def time(self, kind: str, size: int) -> float:
        seconds = {"verify": 1.0 + size / 10 - (0.3 if size == 4 else 0.0), "later": size / 200}.get(kind, size / 100)
        self.calls[kind, size] = self.calls.get((kind, size), 0) + 1
        spike = (kind, size, self.calls[kind, size]) == ("verify", 2, 3)  # in round 2 of 0-5
        _SpikyPieces.spiked |= spike
        return seconds * self.load * (6.0 if spike else 1.0)

    def builder(self, builder, rule) -> float:
        assert rule.sizing and rule.curve.verify  # sized by the pieces measured before
        return (0.009 if type(builder).__name__ == "Eagle2Builder" else 0.005) * self.load

    def close(self) -> None:
        pass


def test_a_curve_is_priced_from_round_ratios_robust_to_load_and_spikes(target, monkeypatch):
    monkeypatch.setattr(cost_measure, "_Pieces", _SpikyPieces)
    curve = measure_curve(target, HeadDrafter(random_head(target), target), reps=5, sizes=(1, 2, 4, 8), widths=(1, 2))
    ratios = dict((n, s / curve.plain) for n, s in curve.verify)
    assert ratios[1] == pytest.approx(1.1) and ratios[2] == pytest.approx(1.2)  # the spiked round is outvoted
    assert ratios[4] == pytest.approx(1.1) and ratios[8] == pytest.approx(1.8)  # the dip is kept: it is real
    assert [s / curve.plain for _, s in curve.call] == pytest.approx([0.01, 0.02])
    assert [s / curve.plain for _, s in curve.later] == pytest.approx([0.005, 0.01])
    assert curve.builder / curve.plain == pytest.approx(0.005)  # the device's default method's (TALON's)
    assert [(m, t / curve.plain) for m, t in curve.builders] == [("eagle2", pytest.approx(0.009))]
    assert curve.key["method"] == cost_measure.MEASUREMENT and _SpikyPieces.spiked
    # each method's steps are priced with its own builder's work; hybrid builds TALON's tree
    eagle2 = curve.for_method("eagle2")
    assert eagle2.builder / curve.plain == pytest.approx(0.009) and eagle2.verify == curve.verify
    assert curve.for_method("talon") is curve and curve.for_method("hybrid") is curve
    assert eagle2.price(5, [1, 2]) - curve.price(5, [1, 2]) == pytest.approx(2 * 0.004)
    assert CostCurve.from_dict(curve.to_dict()) == curve
