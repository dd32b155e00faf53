"""Fast tier for trees that grow while they pay: the calibration, the cost curve, the cost rule in the
builders (toy drafters, synthetic curves) and the stop reasons every builder records."""

from __future__ import annotations

import json
import math
from dataclasses import replace
from pathlib import Path

import pytest
import torch

from talon.drafters.base import NoDrafter
from talon.drafters.calibration import (
    CALIBRATION_FILE,
    LOOKUP_CALIBRATION_FILE,
    ODDS_LOG_RANGE,
    Q_EDGES,
    SCALE_STRENGTH,
    Calibration,
    Observation,
    cell,
    exclusive,
    expected_calibration_error,
    fit,
    fit_match_prior,
    load,
    load_drafter_tables,
    log_odds_shift,
    observations,
    q_bin,
    reliability,
    save,
    scale_odds,
)
from talon.drafters.hybrid import HybridDrafter
from talon.drafters.model import ModelDrafter
from talon.drafters.ngram import NgramDrafter
from talon.engine.builders import ChainBuilder, Eagle2Builder, RootOnlyBuilder, StaticBuilder, TalonBuilder
from talon.engine.sizing import Candidate, CostRule
from talon.runtime.cost_curve import CostCurve, CurveKey, cached_curve, store_curve
from talon.tree import (
    ACCEPTED,
    CUT_BY_COST,
    NOT_REACHED,
    REJECTED,
    SOURCE_MODEL,
    SOURCE_RETRIEVAL,
    STOP_CAP,
    STOP_COST,
    STOP_DEPTH,
    STOP_DRAFTER,
    STOP_PLAIN,
    DraftTree,
    Verdict,
)
from tests.toy import TableDrafter, one_hot_fn, random_fn, uniform_fn

VOCAB = 16
NOTHING = torch.full((VOCAB,), -math.inf)


def curve(slope: float, call: float = 0.05, overhead: float = 0.0) -> CostCurve:
    """A synthetic curve: verifying n nodes costs ``1 - overhead + slope * (n - 1)`` plain steps, a call ``call``."""
    plain = 0.01
    verify = tuple((n, plain * (1 - overhead + slope * (n - 1))) for n in (1, 2, 4, 8, 16, 32, 64, 128))
    return CostCurve(plain=plain, verify=verify, call=tuple((w, plain * call) for w in (1, 8, 64)))


def grown(builder, fn, rule: CostRule | None = None, record_gate: bool = False):
    return builder.build(TableDrafter(VOCAB, fn), [1, 2, 3], record_gate=record_gate, rule=rule)


# ---- calibration -------------------------------------------------------------------------------------------
def test_cells_bin_probability_depth_source_and_match():
    assert q_bin(0.0) == 0 and q_bin(1.0) == len(Q_EDGES) - 2 and q_bin(0.55) == q_bin(0.5)
    assert cell(0.5, 7, SOURCE_MODEL) == (SOURCE_MODEL, 4, q_bin(0.5), 0)  # depth 4+ shares a cell
    assert cell(0.5, 1, SOURCE_RETRIEVAL, 5)[3] == 3 and cell(0.5, 1, SOURCE_MODEL, 5)[3] == 0


def _tree_and_verdict() -> tuple[DraftTree, Verdict]:
    """Root with children a (q .8, accepted) and b (q .1, rejected); a's child c (q .5, rejected); b's
    child d (q .9, not reached: its parent was refused)."""
    tree = DraftTree.with_root(0)
    a = tree.add(0, 1, math.log(0.8))
    b = tree.add(0, 2, math.log(0.1))
    c = tree.add(a, 3, math.log(0.5))
    tree.add(b, 4, math.log(0.9))
    status = ["root", ACCEPTED, REJECTED, REJECTED, NOT_REACHED]
    return tree, Verdict(status, [0, a], 9, [1, -1, -1, -1, -1], [1.0] * 5) if c else None


def test_only_reached_nodes_are_counted_and_pull_the_estimate():
    tree, verdict = _tree_and_verdict()
    obs = observations([(tree, verdict)])
    assert sorted((round(o.q, 2), o.depth, o.accepted) for o in obs) == [
        (0.1, 1, False),
        (0.5, 2, False),
        (0.8, 1, True),
    ]
    cal = Calibration(strength=4.0)
    assert cal(0.8, 1, SOURCE_MODEL) == pytest.approx(0.8)  # no data yet: the raw q
    for _ in range(10):
        cal.observe(tree, verdict)
    # Reached: a (q .8, accepted), b (q .1), c (q .5): 10 accepted where the priors summed to 14.
    r = (10 + SCALE_STRENGTH[SOURCE_MODEL]) / (14 + SCALE_STRENGTH[SOURCE_MODEL])
    assert cal.ratio(SOURCE_MODEL) == pytest.approx(r) and cal.scale(SOURCE_RETRIEVAL) == 1.0
    s = cal.scale(SOURCE_MODEL)  # the odds multiplier that lowers the reached priors' sum by r
    assert s < 1 and sum(10 * scale_odds(q, s) for q in (0.8, 0.1, 0.5)) == pytest.approx(14 * r)
    assert cal(0.8, 1, SOURCE_MODEL) == pytest.approx((10 + 4 * scale_odds(0.8, s)) / (10 + 4))
    assert cal(0.1, 1, SOURCE_MODEL) == pytest.approx((0 + 4 * scale_odds(0.1, s)) / (10 + 4))
    assert cal(0.9, 2, SOURCE_MODEL) == pytest.approx(scale_odds(0.9, s))  # an unseen cell moves with the run


def test_a_fitted_cell_of_certainty_is_learned_from_like_any_other():
    # The shipped head's table has cells at 1.0 (every node of them accepted when fitted): a reached node
    # of such a cell lands in the top bin of the run's priors, not past it.
    tree, verdict = _tree_and_verdict()
    cal = Calibration({cell(0.8, 1, SOURCE_MODEL): 1.0})
    cal.observe(tree, verdict)
    assert cal.ratio(SOURCE_MODEL) < 1 and 0 < cal(0.8, 1, SOURCE_MODEL) <= 1


def test_the_run_level_odds_shift_is_solved_as_bisection_solved_it():
    """Newton's steps inside a bisection bracket: the shift bisection found to 40 halvings, on random
    bins (count, prior; some priors 0 or 1, which no shift moves), the range's end where no shift in
    range reaches the sum, and no shift where the sum cannot move at all."""
    import random

    def bisection(bins, want):
        lo, hi = -ODDS_LOG_RANGE, ODDS_LOG_RANGE
        for _ in range(40):
            mid = (lo + hi) / 2
            if sum(n * scale_odds(p, math.exp(mid)) for n, p in bins) < want:
                lo = mid
            else:
                hi = mid
        return (lo + hi) / 2

    rng = random.Random(0)
    for _ in range(300):
        bins = [(rng.randint(1, 30), rng.choice([rng.random(), rng.random() ** 4, 0.0, 1.0])) for _ in range(40)]
        want = sum(n * p for n, p in bins) * rng.uniform(0.2, 2.0)
        assert log_odds_shift(bins, want) == pytest.approx(bisection(bins, want), abs=1e-6)
    assert log_odds_shift([(5, 0.5)], 5.5) == pytest.approx(ODDS_LOG_RANGE)  # past every scaled sum
    assert log_odds_shift([(5, 0.0), (2, 1.0)], 2.0) == 0.0  # nothing to scale: the run keeps the table


def test_a_run_accepted_less_than_the_fitted_table_lowers_every_cell():
    # The table says 0.6 at depth 1 for q in 0.6's bin; this run's drafts there are accepted 30 % of the
    # time: after 40 steps the scale brings even unseen cells (depth 2) down with it.
    table = {(SOURCE_MODEL, 1, q_bin(0.6), 0): 0.6, (SOURCE_MODEL, 2, q_bin(0.6), 0): 0.6}
    cal = Calibration(table)
    tree = DraftTree.with_root(0)
    tree.add(0, 1, math.log(0.6))
    for step in range(40):
        ok = step % 10 < 3
        cal.observe(tree, Verdict(["root", ACCEPTED if ok else REJECTED], [0, 1] if ok else [0], 9, [1, -1], [1.0] * 2))
    r = (12 + SCALE_STRENGTH[SOURCE_MODEL]) / (24 + SCALE_STRENGTH[SOURCE_MODEL])
    assert cal.ratio(SOURCE_MODEL) == pytest.approx(r)
    assert scale_odds(0.6, cal.scale(SOURCE_MODEL)) == pytest.approx(0.6 * r)
    assert cal(0.6, 2, SOURCE_MODEL) < 0.4 and abs(cal(0.6, 1, SOURCE_MODEL) - 0.3) < 0.05


def test_a_run_accepted_more_than_the_table_raises_sure_cells_without_making_them_certain():
    # Copy chains: the table says 0.9 for deep nodes; this run's first nodes (prior 0.3) are accepted
    # twice as often.  A multiplied-and-clamped prior made the deep cell 1.0, so a 30-node chain looked
    # sure to be accepted to its end; the odds stay below 1, so the chain's path acceptance decays.
    deep = (SOURCE_RETRIEVAL, 4, q_bin(0.85), 3)
    table = {(SOURCE_RETRIEVAL, 1, q_bin(0.5), 3): 0.3, deep: 0.9}
    cal = Calibration(table)
    tree = DraftTree.with_root(0)
    tree.add(0, 1, math.log(0.5), SOURCE_RETRIEVAL, 3)
    for step in range(50):
        ok = step % 10 < 6
        cal.observe(tree, Verdict(["root", ACCEPTED if ok else REJECTED], [0, 1] if ok else [0], 9, [1, -1], [1.0] * 2))
    k = SCALE_STRENGTH[SOURCE_RETRIEVAL]
    assert cal.ratio(SOURCE_RETRIEVAL) == pytest.approx((30 + k) / (15 + k))  # 30 accepted of 50; the table said 15
    assert 0.9 < cal(0.85, 6, SOURCE_RETRIEVAL, 3) < 0.97  # raised, but not to 1
    assert cal(0.85, 6, SOURCE_MODEL) == pytest.approx(0.85)  # another source keeps its own scale
    chain = DraftTree.with_root(0)
    node = 0
    for k in range(30):
        node = chain.add(node, k + 1, math.log(0.85), SOURCE_RETRIEVAL, 3)
    assert cal.path_acceptance(chain)[-1] < 0.5


def test_a_models_drafts_move_the_run_level_scale_faster_than_prompt_lookups():
    # The same verdicts (a 0.5 prior accepted 20 % of the time, 10 steps) pull the model's scale further
    # from the table than prompt lookup's: lookup's acceptance swings between copies and guesses.
    ratios = {}
    for source, match in ((SOURCE_MODEL, 0), (SOURCE_RETRIEVAL, 3)):
        cal = Calibration({(source, 1, q_bin(0.5), match): 0.5})
        tree = DraftTree.with_root(0)
        tree.add(0, 1, math.log(0.5), source, match)
        for step in range(10):
            ok = step % 5 == 0
            status = ["root", ACCEPTED if ok else REJECTED]
            cal.observe(tree, Verdict(status, [0, 1] if ok else [0], 9, [1, -1], [1.0] * 2))
        k = SCALE_STRENGTH[source]
        assert cal.ratio(source) == pytest.approx((2 + k) / (5 + k))
        ratios[source] = cal.ratio(source)
    assert ratios[SOURCE_MODEL] < ratios[SOURCE_RETRIEVAL] < 1.0


def test_scaling_odds_keeps_probabilities_in_bounds_and_one_is_the_identity():
    assert scale_odds(0.3, 1.0) == pytest.approx(0.3)
    assert scale_odds(0.01, 2.0) == pytest.approx(0.02, rel=0.02)  # small p: about p * s
    assert scale_odds(0.9, 100.0) < 1.0 and scale_odds(0.9, 0.01) > 0.0
    assert scale_odds(0.0, 5.0) == 0.0 and scale_odds(1.0, 0.2) == 1.0
    assert [scale_odds(0.5, s) for s in (0.5, 1.0, 2.0)] == sorted(scale_odds(0.5, s) for s in (0.5, 1.0, 2.0))


def test_expected_tokens_is_one_plus_the_path_acceptances():
    tree, _ = _tree_and_verdict()
    cal = Calibration({(SOURCE_MODEL, 1, q_bin(0.8), 0): 0.5})
    acc = cal.path_acceptance(tree)
    assert acc == pytest.approx([1.0, 0.5, 0.1, 0.5 * 0.5, 0.1 * 0.9])
    assert cal.expected_tokens(tree) == pytest.approx(1 + 0.5 + 0.1 + 0.25 + 0.09)


def test_a_parents_children_never_sum_past_one():
    """Siblings exclude each other: the cell's value stands until the parent's earlier children leave
    less; a lone child or a chain keeps its cell's value."""
    assert exclusive(0.6, 0.0) == 0.6 and exclusive(0.6, 0.7) == pytest.approx(0.3) and exclusive(0.6, 1.2) == 0.0
    tree = DraftTree.with_root(0)
    first = tree.add(0, 1, math.log(0.45))
    second = tree.add(0, 2, math.log(0.42))
    third = tree.add(0, 3, math.log(0.02))
    child = tree.add(first, 4, math.log(0.45))
    cal = Calibration(
        {(SOURCE_MODEL, d, q_bin(0.45), 0): 0.55 for d in (1, 2)} | {(SOURCE_MODEL, 1, q_bin(0.02), 0): 0.03}
    )
    given = cal.given_parents(tree)
    assert given[first] == pytest.approx(0.55) and given[second] == pytest.approx(0.45) and given[third] == 0.0
    assert given[child] == pytest.approx(0.55)  # a lone child of its parent
    assert cal.path_acceptance(tree)[child] == pytest.approx(0.55 * 0.55)
    assert cal.expected_tokens(tree) == pytest.approx(1 + 0.55 + 0.45 + 0.0 + 0.55 * 0.55)


@pytest.mark.parametrize(
    "builder", [TalonBuilder(budget=40, topk=6, mu=0.01), Eagle2Builder(budget=30, topk=6, depth=4)]
)
@pytest.mark.parametrize("seed", range(4))
def test_grown_trees_value_siblings_as_the_calibration_does(builder, seed):
    """An optimistic table (every cell 0.7) on flat toy distributions: each parent's children, valued as
    the builder grew them, sum to at most 1, and the tree's expected tokens are the calibration's."""
    optimistic = {(SOURCE_MODEL, d, b, 0): 0.7 for d in (1, 2, 3, 4) for b in range(len(Q_EDGES) - 1)}
    rule = CostRule(Calibration(optimistic), curve(slope=0.01, call=0.01), sizing=False)
    result = grown(builder, random_fn(VOCAB, seed), rule)
    tree = result.tree
    given = rule.calibration.given_parents(tree)
    for parent in range(len(tree)):
        assert sum(given[c] for c in tree.children(parent)) <= 1 + 1e-9
    assert any(len(tree.children(p)) > 1 for p in range(len(tree)))
    assert result.expected == pytest.approx(rule.calibration.expected_tokens(tree))


def test_prompt_lookup_starts_from_a_prior_by_match_length():
    cal = Calibration()
    # a single continuation (q = 1) of a one-token match is a guess; of a three-token match, likely
    assert cal(1.0, 1, SOURCE_RETRIEVAL, 1) < 0.5 < cal(1.0, 1, SOURCE_RETRIEVAL, 2) < cal(1.0, 1, SOURCE_RETRIEVAL, 3)
    assert cal(0.5, 1, SOURCE_RETRIEVAL, 3) == pytest.approx(cal(1.0, 1, SOURCE_RETRIEVAL, 3) / 2)
    # a fitted retrieval cell wins over the match-length prior
    assert Calibration({(SOURCE_RETRIEVAL, 1, q_bin(0.5), 3): 0.9})(0.5, 1, SOURCE_RETRIEVAL, 3) == pytest.approx(0.9)


def test_the_match_prior_fit_recovers_acceptance_per_match_length():
    g = torch.Generator().manual_seed(1)
    qs = torch.rand(6000, generator=g).tolist()
    truth = {1: 0.3, 2: 0.6, 3: 0.9}
    obs = [
        Observation(q, 1, SOURCE_RETRIEVAL, 1 + k % 3, bool(u < truth[1 + k % 3] * q))
        for k, (q, u) in enumerate(zip(qs, torch.rand(6000, generator=g).tolist()))
    ]
    obs.append(Observation(0.9, 1, SOURCE_MODEL, 0, False))  # a model draft is not a lookup observation
    fitted = fit_match_prior(obs)
    assert set(fitted) == {1, 2, 3}
    assert all(abs(fitted[m] - truth[m]) < 0.05 for m in truth)


def test_a_head_directory_merges_its_own_table_with_its_lookup_table(tmp_path):
    own = {(SOURCE_MODEL, 1, 3, 0): 0.25, (SOURCE_RETRIEVAL, 1, 3, 3): 0.5}
    lookup = {(SOURCE_RETRIEVAL, 1, 3, 3): 0.75, (SOURCE_RETRIEVAL, 2, 13, 1): 0.95, (SOURCE_MODEL, 1, 3, 0): 0.0}
    assert load_drafter_tables(tmp_path) is None
    save(own, tmp_path / CALIBRATION_FILE)
    assert load_drafter_tables(tmp_path) == own
    save(lookup, tmp_path / LOOKUP_CALIBRATION_FILE)
    assert load_drafter_tables(tmp_path) == {
        (SOURCE_MODEL, 1, 3, 0): 0.25,
        (SOURCE_RETRIEVAL, 1, 3, 3): 0.75,
        (SOURCE_RETRIEVAL, 2, 13, 1): 0.95,
    }


def test_fit_is_monotone_in_q_and_calibrates_a_miscalibrated_drafter():
    # The drafter says q, the truth is q**2 (overconfident): the fit recovers the truth per bin.
    g = torch.Generator().manual_seed(0)
    qs = torch.rand(20000, generator=g).tolist()
    accepted = (torch.rand(20000, generator=g) < torch.tensor(qs) ** 2).tolist()
    obs = [Observation(q, 1, SOURCE_MODEL, 0, a) for q, a in zip(qs, accepted)]
    table = fit(obs)
    values = [table[(SOURCE_MODEL, 1, b, 0)] for b in range(len(Q_EDGES) - 1) if (SOURCE_MODEL, 1, b, 0) in table]
    assert values == sorted(values)
    raw = expected_calibration_error(reliability(obs))
    cal = Calibration(table)
    fitted = expected_calibration_error(reliability(obs, lambda o: cal(o.q, o.depth, o.source, o.match)))
    assert raw > 0.1 and fitted < 0.02


def test_fit_pools_a_dip_keeps_cells_of_min_count_and_drops_thinner_ones():
    # q in 0.5-0.6 accepted at 0.8 and q in 0.6-0.7 at 0.4 (20 each): not monotone, so both cells take
    # their pooled 0.6; a cell of exactly min_count observations is fitted, one of fewer is not.
    obs = [Observation(0.55, 1, SOURCE_MODEL, 0, k < 16) for k in range(20)]
    obs += [Observation(0.65, 1, SOURCE_MODEL, 0, k < 8) for k in range(20)]
    obs += [Observation(0.25, 2, SOURCE_MODEL, 0, k < 5) for k in range(19)]
    table = fit(obs, min_count=20)
    assert table == {(SOURCE_MODEL, 1, 7, 0): pytest.approx(0.6), (SOURCE_MODEL, 1, 8, 0): pytest.approx(0.6)}


def test_reliability_and_ece_by_hand():
    obs = [Observation(0.9, 1, SOURCE_MODEL, 0, a) for a in (True, True, False, False)]
    (row,) = reliability(obs)
    assert (row["confidence"], row["accepted"], row["count"]) == (pytest.approx(0.9), 0.5, 4)
    assert expected_calibration_error([row]) == pytest.approx(0.4)


def test_fitted_tables_round_trip(tmp_path):
    table = {(SOURCE_MODEL, 1, 3, 0): 0.25, (SOURCE_RETRIEVAL, 2, 13, 3): 0.75}
    save(table, tmp_path / "c.json", {"note": "x"})
    assert load(tmp_path / "c.json") == table
    assert load(tmp_path / "missing.json") is None
    assert [f.name for f in tmp_path.iterdir()] == ["c.json"]  # written whole, no temporary file left
    # a table fitted with other q bins names other cells: read as this code's, it would misprice every node
    data = json.loads((tmp_path / "c.json").read_text())
    (tmp_path / "old.json").write_text(json.dumps({**data, "q_edges": list(Q_EDGES[:-2]) + [1.0]}))
    assert load(tmp_path / "old.json") is None


def test_an_unreadable_calibration_table_is_reported_not_silently_dropped(tmp_path, caplog):
    (tmp_path / "c.json").write_text('{"q_edges": [0.1, 0.2], "cells": [{"sour')  # cut short by a crash
    with caplog.at_level("WARNING", logger="talon.drafters.calibration"):
        assert load(tmp_path / "c.json") is None
    assert "c.json is unreadable" in caplog.text and "raw confidence" in caplog.text


# ---- the cost curve -----------------------------------------------------------------------------------------
def test_curve_interpolates_extrapolates_and_prices():
    c = curve(slope=0.1, call=0.05, overhead=0.2)
    assert c.verify_ratio(1) == pytest.approx(0.8)
    assert c.verify_ratio(3) == pytest.approx(0.8 + 0.2)
    assert c.verify_ratio(256) == pytest.approx(0.8 + 0.1 * 255)  # past the last point: its slope
    assert c.price(1, []) == pytest.approx(1.0)  # a plain step is the unit, its loop overhead included
    assert c.price(5, [1, 2]) == pytest.approx(1.0 + 0.4 + 0.05 + 0.05)
    assert CostCurve.from_dict(c.to_dict()) == c


def test_a_measured_first_call_and_bookkeeping_are_priced():
    """The step's first call (the drafter catching up with the last step's tokens) is priced as measured,
    not as a later width-1 call, and a drafted step pays its bookkeeping; a plain step pays neither."""
    c = replace(curve(slope=0.1, call=0.05, overhead=0.2), root=0.0012, observe=0.0003)  # a plain step 0.01
    assert c.price(1, []) == pytest.approx(1.0)
    assert c.price(1, [1]) == pytest.approx(1.0 + 0.12)  # the root call made, no tree: no bookkeeping
    assert c.price(5, [1, 2]) == pytest.approx(1.0 + 0.4 + 0.12 + 0.05 + 0.03)
    assert CostCurve.from_dict(c.to_dict()) == c
    built = replace(c, builder=0.0004)  # the builder's own work, per call, the root call's included
    assert built.price(1, []) == pytest.approx(1.0)
    assert built.price(1, [1]) == pytest.approx(1.0 + 0.12 + 0.04)
    assert built.price(5, [1, 2]) == pytest.approx(1.0 + 0.4 + 0.12 + 0.05 + 0.03 + 2 * 0.04)
    assert CostCurve.from_dict(built.to_dict()) == built
    old = {k: v for k, v in c.to_dict().items() if k not in ("root", "observe")}  # a curve stored before
    assert CostCurve.from_dict(old).price(5, [1, 2]) == pytest.approx(1.0 + 0.4 + 0.05 + 0.05)


def test_calls_after_a_steps_second_are_priced_as_later_calls():
    """A step's third and later drafter calls find the drafter's weights in the caches the calls before
    them filled: they take ``later``'s price; the second takes ``call``'s; a curve without ``later`` (stored
    before it was measured) prices them all as ``call``."""
    c = replace(curve(slope=0.1, call=0.05, overhead=0.2), root=0.0012)  # a plain step 0.01
    warm = replace(c, later=((1, 0.0003), (4, 0.0006)))
    assert warm.price(5, [1, 2]) == pytest.approx(c.price(5, [1, 2]))  # no third call: nothing changes
    assert warm.price(6, [1, 2, 1]) == pytest.approx(1.0 + 0.5 + 0.12 + 0.05 + 0.03)
    assert warm.price(9, [1, 1, 4, 2]) == pytest.approx(1.0 + 0.8 + 0.12 + 0.05 + 0.06 + 0.04)
    assert c.price(6, [1, 2, 1]) == pytest.approx(1.0 + 0.5 + 0.12 + 0.05 + 0.05)
    assert CostCurve.from_dict(warm.to_dict()) == warm
    stored_before = {k: v for k, v in warm.to_dict().items() if k != "later"}
    assert CostCurve.from_dict(stored_before).price(6, [1, 2, 1]) == pytest.approx(c.price(6, [1, 2, 1]))


def test_past_the_last_point_a_bigger_tree_never_looks_cheaper():
    """Two noisy last points (verify(128) under verify(64), as a GPU's kernel choice or load can give)
    must not extrapolate to trees that cost less the bigger they get: the cap could then be any size."""
    c = replace(curve(0.1), verify=((1, 0.008), (64, 0.020), (128, 0.019)))  # seconds; a plain step 0.01
    assert c.verify_ratio(1000) == pytest.approx(1.9) and c.verify_ratio(129) == pytest.approx(1.9)
    assert c.price(1000, [1]) >= c.price(128, [1])


def test_curves_are_cached_by_what_they_depend_on(tmp_path):
    key = CurveKey("t", "d", "float32", "cpu", 2, "k", "2.13")
    c = replace(curve(0.1), key=vars(key).copy())
    store_curve(c, key, tmp_path)
    assert cached_curve(key, tmp_path) == c
    assert cached_curve(replace(key, threads=1), tmp_path) is None
    assert cached_curve(replace(key, cpu="AMD EPYC · family 25 model 17 · avx2 avx512f"), tmp_path) is None


def test_a_broken_curve_file_is_a_missing_one(tmp_path):
    """A cached curve a price cannot be read from (hand-edited, cut, another program's JSON) is measured
    again rather than crashing a run or silently making every step plain."""
    key = CurveKey("t", "d", "float32", "cpu", 2, "k", "2.13")
    good = replace(curve(0.1), key=vars(key).copy())
    path = store_curve(good, key, tmp_path)
    assert not list(path.parent.glob("*.tmp"))  # the temporary file is gone after the replace
    d = good.to_dict()
    for broken in (
        [],
        None,
        3,
        {**d, "plain": 0},
        {**d, "plain": float("nan")},
        {**d, "plain": -1.0},
        {**d, "verify": []},
        {**d, "verify": [[1, 0.01], [8, 0.02], [8, 0.03]]},  # a repeated size: interpolation divides by 0
        {**d, "verify": [[8, 0.02], [1, 0.01]]},
        {**d, "verify": [[1, float("inf")]]},
        {**d, "call": [[0, 0.001]]},
        {**d, "root": -0.001},
        {**d, "observe": float("nan")},
    ):
        path.write_text(json.dumps(broken))
        assert cached_curve(key, tmp_path) is None, broken
        if isinstance(broken, dict):
            with pytest.raises(ValueError, match="cost curve"):
                CostCurve.from_dict(broken)
    path.write_text(json.dumps(d))
    assert cached_curve(key, tmp_path) == good


def test_the_curve_key_names_the_rows_mkl_takes():
    # The plain step, every price's unit, changes with the kernel chosen at load for one or two rows.
    from talon.engine.cost_measure import curve_key
    from talon.models.cpu_linear import PackedLinear, mkl_rows, onednn_linear_works, pack_linears
    from tests.tiny import tiny_target

    if not onednn_linear_works():
        pytest.skip("no prepacked oneDNN linear in this PyTorch build")
    target = tiny_target()
    pack_linears(target.model)
    packed = [m for m in target.model.modules() if isinstance(m, PackedLinear)]
    keys = []
    for rows in (0, 2):
        for m in packed:
            m.plain_rows = rows
        assert mkl_rows(target.model) == rows
        keys.append(curve_key(target, NoDrafter()).kernels)
    assert "mkl_rows=0" in keys[0] and "mkl_rows=2" in keys[1]


def test_the_curve_key_names_a_drafters_fused_products_directly_and_in_a_hybrid():
    # A drafter's network (here a draft LM, which a lookup of ``drafter.head`` missed) whose projections run
    # as one product each calls its kernel fewer times a forward: its calls cost less, and a curve measured
    # before it fused them is measured again.
    from talon.engine.cost_measure import curve_key
    from talon.models.cpu_linear import onednn_linear_works, pack_linears
    from talon.models.fused_linear import fuse_projections
    from tests.tiny import tiny_target

    if not onednn_linear_works():
        pytest.skip("no prepacked oneDNN linear in this PyTorch build")
    target = tiny_target()
    draft_lm = tiny_target(seed=1, layers=1)
    drafter = ModelDrafter(draft_lm)
    apart = curve_key(target, drafter).kernels
    pack_linears(draft_lm.model)
    assert fuse_projections(draft_lm.model) == 2
    fused = curve_key(target, drafter).kernels
    hybrid = curve_key(target, HybridDrafter(drafter, NgramDrafter(target.vocab_size))).kernels
    assert "draft_fused_layers" not in apart and "draft_fused_layers=2" in fused and fused == hybrid


def test_the_curve_key_names_the_openmp_wait_only_where_the_environment_sets_it(monkeypatch):
    # The app waits passively (``ui`` sets OMP_WAIT_POLICY=PASSIVE), which makes a small CPU step dearer than
    # under the default wait a benchmark runs with: the two must not share a cost curve.
    from talon.engine.cost_measure import curve_key
    from tests.tiny import tiny_target

    target, drafter = tiny_target(), NoDrafter()
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    default = curve_key(target, drafter)
    assert "openmp_wait" not in default.kernels  # curves cached before the wait was in the key keep their keys
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    passive = curve_key(target, drafter)
    assert passive.kernels.endswith(", openmp_wait=(OMP_WAIT_POLICY=PASSIVE)") and passive.digest() != default.digest()


def test_the_curve_key_names_this_cpu():
    # A cached curve is another machine's if the VM moved host: the key holds what tells CPUs apart.
    from talon.models.device import CPU_FLAGS, cpu_flags, cpu_identity

    identity = cpu_identity()
    assert set(cpu_flags().split()) <= set(CPU_FLAGS)
    if Path("/proc/cpuinfo").exists():
        assert "family" in identity and cpu_flags() in identity


# ---- the cost rule in the builders --------------------------------------------------------------------------
def test_a_sure_drafter_on_cheap_verification_grows_to_the_cap():
    rule = CostRule(Calibration(), curve(slope=0.01, call=0.01), sizing=True)
    result = grown(TalonBuilder(budget=20, topk=1, mu=0.5), one_hot_fn(VOCAB, eps=1e-4), rule)
    assert result.tree.num_drafts == 20 and result.stop == STOP_CAP and result.tree.max_depth == 20


def test_a_layer_trimmed_by_cost_still_grows_below_the_nodes_it_kept():
    # A sure drafter under a Top-6 root: the five unlikely root children do not pay and are cut, and the
    # chain below the likely one is drafted layer after layer (the trimmed root does not end the tree).
    rule = CostRule(Calibration(), curve(slope=0.05, call=0.02), sizing=True)
    result = grown(TalonBuilder(budget=40, topk=6, mu=0.1), one_hot_fn(VOCAB, eps=0.02), rule, record_gate=True)
    assert result.gate[0].status.count(CUT_BY_COST) >= 4
    assert result.tree.max_depth >= 4 and result.tree.num_drafts < 40 and result.stop == STOP_COST


def test_a_wide_frontier_pays_for_a_layer_when_its_likely_nodes_do():
    # One likely frontier node among many unlikely ones: the call covers them all, but the layer pays
    # for the likely node's child alone; a frontier of unlikely nodes only does not pay.
    rule = CostRule(Calibration(), curve(slope=0.1, call=0.05), sizing=True)
    assert rule.layer_pays(1.9, 7, [1], [0.9] + [0.01] * 5, [0.9] + [0.05] * 5)
    assert not rule.layer_pays(1.05, 7, [1], [0.01] * 6, [0.05] * 6)


def test_a_sure_chain_is_extended_and_an_unsure_one_is_not():
    # A node's best child is expected to be as sure (given the node) as the node was given its parent:
    # the same frontier path probability pays for a layer below a sure node and not below an unsure one.
    rule = CostRule(Calibration(), curve(slope=0.1, call=0.1), sizing=True)
    assert rule.layer_pays(1.9, 2, [1], [0.9], [0.9])
    assert not rule.layer_pays(1.4, 2, [1], [0.4], [0.4])
    assert not rule.layer_pays(1.9, 3, [1, 1], [0.9], [0.3])  # sure path, but its last node was unsure


def test_a_run_that_turns_sure_grows_deeper_trees_again():
    # Unsure first, then one-hot: the rule judges every step afresh, so once the drafter is sure the
    # trees grow deep (no estimate learned while unsure holds them shallow).
    rule = CostRule(Calibration(), curve(slope=0.05, call=0.05), sizing=True)
    builder = TalonBuilder(budget=40, topk=4, mu=0.1)
    unsure = builder.build(TableDrafter(VOCAB, random_fn(VOCAB, 1, scale=(0.2, 0.3))), [1, 2, 3], rule=rule)
    sure = builder.build(TableDrafter(VOCAB, one_hot_fn(VOCAB, eps=0.02)), [1, 2, 3], rule=rule)
    assert unsure.tree.max_depth <= 1 and sure.tree.max_depth >= 4


def test_an_unsure_drafter_on_dear_verification_makes_a_plain_step():
    rule = CostRule(Calibration(), curve(slope=0.5, call=0.2), sizing=True)
    result = grown(TalonBuilder(budget=20, topk=4, mu=0.1), uniform_fn(VOCAB), rule)
    assert len(result.tree) == 1 and result.stop == STOP_COST and result.drafter_forwards == 1
    assert result.expected == 1.0 and result.price == pytest.approx(1 + 0.2)


def test_where_a_third_row_costs_less_than_a_second_unlikely_candidates_pay_together():
    # The Zen 4's curve: verifying 2 nodes costs 1.11 plain steps, 3 to 6 nodes 0.97, 7 or more 1.11+.
    plain = 0.01
    ratios = {1: 1.0, 2: 1.11, 3: 0.97, 4: 0.96, 5: 0.97, 6: 0.99, 7: 1.10, 8: 1.11, 16: 1.43, 32: 1.97}
    dip = CostCurve(plain=plain, verify=tuple((n, plain * r) for n, r in ratios.items()), call=((1, plain * 0.06),))
    rule = CostRule(Calibration(), dip, sizing=True)
    weak = [Candidate(0, t, math.log(0.05), SOURCE_MODEL, 0, accept=0.05) for t in range(6)]
    # the first alone lowers E / price (1.05 / 1.17 < 1 / 1.06); with the next two it beats the root alone
    assert (1 + 0.05) / dip.price(2, [1]) < 1 / dip.price(1, [1])
    # 6 nodes; a seventh would cost a step's tenth more
    assert rule.affordable(1.0, 1, [1], [c.accept for c in weak]) == 5
    assert rule.affordable(1.0, 1, [1], [weak[0].accept]) == 0  # one alone: a plain step
    # on a curve that only rises, the best prefix is where the next candidate stops paying
    rising = CostRule(Calibration(), curve(slope=0.1, call=0.06), sizing=True)
    cands = [Candidate(0, t, 0.0, SOURCE_MODEL, 0, accept=a) for t, a in enumerate((0.5, 0.2, 0.08, 0.01))]
    kept = rising.affordable(1.0, 1, [1], [c.accept for c in cands])
    assert kept == 2 and (1.7 + 0.08) / rising.curve.price(4, [1]) < 1.7 / rising.curve.price(3, [1])


@pytest.mark.parametrize("seed", range(6))
def test_every_kept_node_raises_tokens_per_price_and_the_next_would_not(seed):
    c = curve(slope=0.06, call=0.08)
    rule = CostRule(Calibration(), c, sizing=True)
    result = grown(TalonBuilder(budget=40, topk=6, mu=0.05), random_fn(VOCAB, seed), rule, record_gate=True)
    tree, widths = result.tree, result.call_widths
    acc = rule.calibration.path_acceptance(tree)
    assert result.expected == pytest.approx(sum(acc))
    assert result.price == pytest.approx(c.price(len(tree), widths))
    if len(tree) > 1:  # dropping the last node added lowers E / price (with the calls it was grown with)
        last = len(tree) - 1
        assert sum(acc) / c.price(len(tree), widths) > (sum(acc) - acc[last]) / c.price(len(tree) - 1, widths)
    cut = [(layer, i) for layer in result.gate for i, s in enumerate(layer.status) if s == CUT_BY_COST]
    if result.stop == STOP_COST and cut:  # the first candidate the rule cut would not have paid
        layer, i = cut[0]
        parent = layer.parents[i]
        q = math.exp(layer.path_logprobs[i] - tree.path_logprob[parent])
        p = acc[parent] * rule.calibration(q, layer.depth, SOURCE_MODEL)
        assert (sum(acc) + p) / c.price(len(tree) + 1, widths) <= sum(acc) / c.price(len(tree), widths) + 1e-12


def test_cheaper_verification_buys_bigger_trees():
    sizes = []
    for slope in (0.4, 0.1, 0.02):
        rule = CostRule(Calibration(), curve(slope=slope, call=0.05), sizing=True)
        sizes.append(grown(TalonBuilder(budget=60, topk=6, mu=0.02), random_fn(VOCAB, 3), rule).tree.num_drafts)
    assert sizes[0] <= sizes[1] <= sizes[2] and sizes[0] < sizes[2]


@pytest.mark.parametrize("seed", range(4))
def test_eagle2_keeps_the_reranked_prefix_that_pays_best(seed, monkeypatch):
    c = curve(slope=0.08, call=0.05)
    rule = CostRule(Calibration(), c, sizing=True)
    monkeypatch.setattr(rule, "layer_pays", lambda *a: True)  # every layer drafted, as in the fixed tree
    result = grown(Eagle2Builder(budget=40, topk=4, depth=4), random_fn(VOCAB, seed), rule)
    fixed = grown(Eagle2Builder(budget=40, topk=4, depth=4), random_fn(VOCAB, seed))
    assert result.call_widths == fixed.call_widths and result.tree.num_drafts <= fixed.tree.num_drafts
    ratio = result.expected / result.price
    ranked = sorted(range(1, len(fixed.tree)), key=lambda i: (-fixed.tree.path_logprob[i], i))
    for m in range(fixed.tree.num_drafts + 1):  # no other prefix of the re-ranked candidates pays better
        other = fixed.tree.subset([0] + sorted(ranked[:m]))
        e = rule.calibration.expected_tokens(other)
        assert e / c.price(len(other), result.call_widths) <= ratio + 1e-9


def test_eagle2_judges_a_deeper_layer_against_the_tree_it_would_keep(monkeypatch):
    """EAGLE-2 records every candidate (K x K a layer) but verifies only the re-ranked prefix that pays
    best; whether another layer pays is judged against that prefix, not against every recorded node."""
    c = curve(slope=0.08, call=0.05)
    rule = CostRule(Calibration(), c, sizing=True)
    seen = []
    real = rule.layer_pays

    def spy(expected, nodes, widths, *rest):
        seen.append((expected, nodes, list(widths)))
        return real(expected, nodes, widths, *rest)

    monkeypatch.setattr(rule, "layer_pays", spy)
    grown(Eagle2Builder(budget=60, topk=6, depth=4), random_fn(VOCAB, 1), rule)
    # the same two layers unsized: every recorded candidate kept (42 < the budget of 60)
    everything = grown(Eagle2Builder(budget=60, topk=6, depth=2), random_fn(VOCAB, 1), CostRule(Calibration(), c))
    assert everything.tree.num_drafts == 6 + 36
    assert len(seen) == 2 and seen[0][1] <= 1 + 6  # after the root's six children: at most those
    expected, nodes, _ = seen[1]  # after the second layer: the prefix it would keep, not all 43 nodes
    assert nodes < 1 + 6 + 36
    recorded = everything.tree
    ranked = sorted(range(1, len(recorded)), key=lambda i: (-recorded.path_logprob[i], i))
    kept = recorded.subset([0] + sorted(ranked[: nodes - 1]))
    assert expected == pytest.approx(rule.calibration.expected_tokens(kept))


def test_a_layer_is_judged_on_each_frontier_nodes_acceptance_given_its_parent(monkeypatch):
    # Down a chain the path's acceptance shrinks layer by layer while each node's given its parent stays:
    # the rule's "a sure chain is extended" reads the latter (the path's would stop sure chains early).
    rule = CostRule(Calibration(), curve(slope=0.01, call=0.01), sizing=True)
    seen = []
    real = rule.layer_pays

    def spy(expected, nodes, widths, accept, given):
        seen.append((list(accept), list(given)))
        return real(expected, nodes, widths, accept, given)

    monkeypatch.setattr(rule, "layer_pays", spy)
    result = grown(TalonBuilder(budget=12, topk=1, mu=0.5), one_hot_fn(VOCAB, eps=0.1), rule)
    assert result.tree.max_depth >= 4 and len(seen) >= 4
    for (before, _), (accept, given) in zip(seen, seen[1:]):
        assert len(accept) == len(given) == 1 and accept[0] < before[0]
        assert given[0] == pytest.approx(accept[0] / before[0]) and given[0] > accept[0]


def test_an_auto_sized_eagle2_tree_that_keeps_every_node_stopped_at_its_depth_not_its_cost():
    # Two layers of Top-2 on near-free verification: all six recorded nodes pay and are kept,
    # so the tree ended where EAGLE-2's depth ends it; "cost" would send the reader after a price.
    rule = CostRule(Calibration(), curve(slope=0.001, call=0.001), sizing=True)
    result = grown(Eagle2Builder(budget=24, topk=2, depth=2), uniform_fn(VOCAB), rule)
    assert result.tree.num_drafts == 2 + 2 * 2 and result.stop == STOP_DEPTH


def test_without_sizing_the_rule_only_values_and_prices():
    c = curve(slope=0.5, call=0.2)
    plain = grown(TalonBuilder(budget=12, topk=4, mu=0.1), uniform_fn(VOCAB))
    priced = grown(TalonBuilder(budget=12, topk=4, mu=0.1), uniform_fn(VOCAB), CostRule(Calibration(), c))
    assert plain.tree.token == priced.tree.token and priced.tree.num_drafts == 12
    assert plain.price is None and priced.price == pytest.approx(c.price(13, priced.call_widths))
    with pytest.raises(ValueError, match="cost curve"):
        CostRule(Calibration(), None, sizing=True)


@pytest.mark.parametrize(
    "builder, fn, stop",
    [
        (TalonBuilder(budget=8, topk=3, mu=0.1), random_fn(VOCAB, 0), STOP_CAP),
        (
            TalonBuilder(budget=30, topk=3, mu=0.1),
            lambda ctx: random_fn(VOCAB)(ctx) if len(ctx) < 5 else NOTHING,
            STOP_DRAFTER,
        ),
        (ChainBuilder(4), one_hot_fn(VOCAB), STOP_DEPTH),
        (Eagle2Builder(budget=8, topk=3, depth=3), random_fn(VOCAB, 0), STOP_DEPTH),
        (StaticBuilder(((0,), (1,), (0, 0))), random_fn(VOCAB, 0), STOP_DEPTH),
        (RootOnlyBuilder(), random_fn(VOCAB, 0), STOP_PLAIN),
    ],
)
def test_fixed_builders_say_why_they_stopped(builder, fn, stop):
    assert grown(builder, fn).stop == stop


def test_the_calibration_cli_refuses_bad_input_and_writes_no_empty_table(tmp_path, capsys, monkeypatch):
    """A missing prompts file or a drafter that does not load ends with its message (tracebacks before);
    a run that reached no drafts (``--source retrieval`` with a drafter without prompt lookup) writes
    nothing rather than an empty table, which would read as perfectly calibrated."""
    from talon.training import calibrate

    out = tmp_path / "c.json"
    with pytest.raises(SystemExit):
        calibrate.main(["--out", str(out), "--prompts", "1"])
    assert "--prompts must be at least 2" in capsys.readouterr().err
    monkeypatch.setattr(calibrate.ModelRegistry, "get", lambda *a, **k: pytest.fail("a model would load"))
    assert calibrate.main(["--out", str(out), "--extra", str(tmp_path / "missing.jsonl")]) == 2
    assert "missing.jsonl" in capsys.readouterr().err
    # an --out that cannot take the table is refused before decoding (it failed after, losing the fit)
    (tmp_path / "afile").write_text("")
    for bad, said in ((tmp_path, "is a directory"), (tmp_path / "afile" / "c.json", "afile is a file, not a folder")):
        assert calibrate.main(["--out", str(bad), "--extra"]) == 2
        assert said in capsys.readouterr().err

    monkeypatch.setattr(calibrate.ModelRegistry, "get", lambda self, spec, **k: object())
    monkeypatch.setattr(calibrate, "make_drafter", lambda *a, **k: None)
    monkeypatch.setattr(calibrate, "collect", lambda *a, **k: [])
    assert calibrate.main(["--out", str(out), "--prompts", "4", "--source", "retrieval", "--extra"]) == 1
    err = capsys.readouterr().err
    assert "no retrieval drafts were reached" in err and "lookup+SPEC" in err and not out.exists()
