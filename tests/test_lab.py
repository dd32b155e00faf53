"""Fast tier: the tree lab on the tiny random Llama: a frozen step rebuilt with other settings gives the
tree and verdict a decode started at that context with those settings gives; the gate record; re-rolls."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for, hybrid_with_lookup
from talon.drafters.head import HeadDrafter
from talon.engine.cost_measure import NOT_KEPT
from talon.engine.decode import Replay, replay, run_settings, run_to_end
from talon.engine.frozen_step import LAB_METHODS, FrozenStep, step_context, step_depth_limit
from talon.models.registry import ModelRegistry
from talon.runtime.cost_curve import CostCurve
from talon.tree import ADMITTED, BELOW_GATE, BEYOND_K, CUT_BY_BUDGET, STOP_END
from tests.first_step import first_step
from tests.tiny import prompt_ids, random_head, tiny_target

CONFIGS = [
    TreeConfig(method="talon", budget=12, topk=3, mu=0.05),
    TreeConfig(method="talon", budget=20, topk=2, mu=0.3),
    TreeConfig(method="talon", budget=6, topk=4, mu=0.01),
    TreeConfig(method="eagle2", budget=10, topk=3, depth=4),
    TreeConfig(method="static", budget=9, depth=4),
    TreeConfig(method="chain", gamma=5),
    TreeConfig(method="hybrid", budget=12, topk=3, mu=0.05),
    TreeConfig(method="talon", budget=12, topk=0, mu=0.1),
]


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.fixture(scope="module")
def registry(target):
    registry = ModelRegistry()
    head = random_head(target)
    registry.get_derived("tiny-head", lambda: head)
    return registry


@pytest.fixture(scope="module")
def run(target, registry):
    """A finished greedy TALON run on the tiny target with its own first layer as drafter."""
    drafter = drafter_for("talon", "layers:1", target, registry)
    return run_to_end(target, drafter, CONFIGS[0], DecodeConfig(max_new_tokens=30), prompt_ids=prompt_ids(4))


def test_step_context_is_the_prompt_and_what_came_before(run):
    assert step_context(run, 0) == run.prompt_ids
    k = len(run.steps) - 1
    assert step_context(run, k) == run.prompt_ids + run.output_ids[: sum(len(s.committed_ids) for s in run.steps[:k])]
    assert step_context(run, k)[-1] == run.steps[k].tree.token[0]
    with pytest.raises(ConfigError, match="not a step"):
        step_context(run, len(run.steps))


def test_a_run_step_in_the_lab_drafts_no_deeper_than_the_run_could(target, registry, run):
    """At a run's last steps the lab's trees stop where the run's loop stopped them (the tokens it had
    left, less the bonus), whatever the settings, and say so; one token left makes every tree plain."""
    k = len(run.steps) - 1
    left = run.decode_config["max_new_tokens"] - sum(len(s.committed_ids) for s in run.steps[:k])
    assert step_depth_limit(run, k) == left - 1 and step_depth_limit(run, 0) == 29
    deep = TreeConfig(method="chain", gamma=8)
    lab = FrozenStep.of_run(target, registry, "layers:1", run, k)
    assert lab.depth_limit == left - 1
    got = lab.explore(deep, k)
    assert got.tree.max_depth <= left - 1 and len(got.committed_ids) <= left
    assert FrozenStep.of_run(target, registry, "layers:1", run, 0).explore(deep).tree.max_depth > left - 1
    last = FrozenStep(target, registry, "layers:1", step_context(run, k), depth_limit=0).explore(deep, k)
    assert (last.tree.num_drafts, last.stop, len(last.committed_ids)) == (0, STOP_END, 1)
    unbounded = dataclasses.replace(run, decode_config={})
    assert step_depth_limit(unbounded, k) is None


@pytest.mark.parametrize("spec", ["layers:1", "ngram"])
def test_a_frozen_step_gives_what_a_fresh_decode_gives_for_every_setting(target, registry, run, spec):
    k = len(run.steps) // 2
    context = step_context(run, k)
    lab = FrozenStep(target, registry, spec, context)
    for cfg in CONFIGS * 2:  # twice: the drafter rewinds to the same state each time
        if cfg.method == "hybrid" and spec == "ngram":
            continue
        got = lab.explore(cfg)
        want = first_step(target, drafter_for(cfg.method, spec, target, registry), cfg, context)
        assert (got.tree.token, got.tree.parent) == (want.tree.token, want.tree.parent), cfg
        assert (got.status, got.accepted_path, got.bonus_token) == (
            want.status,
            want.accepted_path,
            want.bonus_token,
        ), cfg
        assert got.drafter_forwards == want.drafter_forwards == len(got.call_widths)


def test_the_run_itself_is_reproduced_at_its_own_settings(target, registry, run):
    for k in (0, 3, len(run.steps) - 1):
        got = FrozenStep(target, registry, "layers:1", step_context(run, k)).explore(CONFIGS[0])
        step = run.steps[k]
        assert (got.tree.token, got.accepted_tokens, got.bonus_token) == (
            step.tree.token,
            step.accepted_tokens,
            step.bonus_token,
        )


def test_the_head_drafter_in_the_lab(target, registry):
    head = registry.get_derived("tiny-head", lambda: None)
    context = prompt_ids(6, length=20)
    lab = FrozenStep(target, registry, "ngram", context)
    lab._drafters["tree"] = HeadDrafter(head, target)  # the lab with a head: start it the way the lab does
    lab.verifier = type(lab.verifier)(target, head.config.feature_layers)
    with torch.inference_mode():
        lab.verifier.prefill(context)
        lab._drafters["tree"].start(context, lab.verifier.features)
    results = [lab.explore(CONFIGS[0]) for _ in range(2)]
    assert results[0].tree.token == results[1].tree.token
    drafter = HeadDrafter(head, target)
    fresh = first_step(target, drafter, CONFIGS[0], context)
    assert results[0].tree.token == fresh.tree.token and results[0].accepted_path == fresh.accepted_path


def test_sampling_in_the_lab_is_the_runs_own_sample(target, registry):
    decode = DecodeConfig(temperature=0.8, seed=11, max_new_tokens=24)
    cfg = CONFIGS[0]
    run = run_to_end(target, drafter_for("talon", "layers:1", target, registry), cfg, decode, prompt_ids=prompt_ids(5))
    for k in (1, len(run.steps) - 2):
        lab = FrozenStep(target, registry, "layers:1", step_context(run, k), temperature=0.8, seed=11)
        got = lab.explore(cfg)
        assert got.committed_ids[: len(run.steps[k].committed_ids)] == run.steps[k].committed_ids


def test_every_method_and_the_sweeps(target, registry, run):
    lab = FrozenStep(target, registry, "layers:1", step_context(run, 2))
    rows = lab.every_method(CONFIGS[0])
    assert set(rows) == set(LAB_METHODS)
    assert all(r.tree.num_drafts <= 12 for m, r in rows.items() if m != "chain")
    budget = lab.sweep(CONFIGS[0], "budget", [4, 8, 16, 24])
    assert [r["nodes"] for r in budget] == [4, 8, 16, 24]
    roots = lab.sweep(CONFIGS[0], "topk", [0, 1, 6])
    assert [r["nodes"] for r in roots] == [12, 12, 12] and roots[2]["widest"] >= 6
    for k in (1, 6):  # a Top-K root: exactly K children, no gate line at the root
        tree = lab.explore(dataclasses.replace(CONFIGS[0], topk=k))
        assert len(tree.tree.children(0)) == k and tree.gate[0].threshold is None
    gated = lab.explore(dataclasses.replace(CONFIGS[0], topk=0))  # K=0: the gate's verdicts make the root layer
    admitted = [t for t, s in zip(gated.gate[0].tokens, gated.gate[0].status) if s == ADMITTED]
    assert gated.gate[0].threshold is not None
    assert sorted(admitted) == sorted(gated.tree.token[c] for c in gated.tree.children(0))
    mu = lab.sweep(CONFIGS[0], "mu", [0.001, 0.05, 1.0])
    assert mu[-1]["widest"] <= mu[0]["widest"] and mu[-1]["depth"] >= mu[0]["depth"]
    with pytest.raises(ConfigError, match="no tree"):
        lab.explore(TreeConfig(method="ar"))
    gated = lab.every_method(dataclasses.replace(CONFIGS[0], topk=0))  # EAGLE-2 needs K >= 1: it says so
    assert set(gated) == set(LAB_METHODS) and "K >= 1" in gated["eagle2"]
    assert all(not isinstance(r, str) for m, r in gated.items() if m != "eagle2")
    # a static tree that does not fit the depth says why; the other methods still build their trees
    shallow = lab.every_method(dataclasses.replace(CONFIGS[0], budget=16, depth=1))
    assert "do not fit in a static tree of depth 1" in shallow["static"]
    assert shallow["talon"].tree.num_drafts == 16 and not isinstance(shallow["eagle2"], str)


def test_the_gate_record_says_why_each_candidate_is_in_or_out(target, registry, run):
    lab = FrozenStep(target, registry, "layers:1", step_context(run, 1))
    cfg = TreeConfig(method="talon", budget=10, topk=3, mu=0.2)
    result = lab.explore(cfg)
    gate = result.gate
    assert gate[0].threshold is None and gate[0].status.count(ADMITTED) == 3
    assert set(gate[0].status) <= {ADMITTED, BEYOND_K}
    tree = result.tree
    for layer in gate[1:]:
        in_tree = sorted((tree.parent[i], tree.token[i]) for i in range(1, len(tree)) if tree.depth[i] == layer.depth)
        admitted = sorted((p, t) for p, t, s in zip(layer.parents, layer.tokens, layer.status) if s == ADMITTED)
        assert admitted == in_tree
        for lp, status in zip(layer.path_logprobs, layer.status):
            assert (lp >= layer.threshold - 1e-9) == (status in (ADMITTED, CUT_BY_BUDGET)), (lp, status)
            assert status in (ADMITTED, BELOW_GATE, CUT_BY_BUDGET)
        assert layer.best == pytest.approx(max(layer.path_logprobs))
    assert len(gate) == tree.max_depth


def test_reroll_counts_every_roll_and_follows_the_target(target, registry, run):
    lab = FrozenStep(target, registry, "layers:1", step_context(run, 0), temperature=1.0)
    result = lab.explore(CONFIGS[0])
    rolled = lab.reroll(result, 4000, seed=3)
    assert rolled.rolls == 4000 and rolled.temperature == 1.0
    dist = torch.tensor(rolled.target)
    empirical = torch.zeros_like(dist)
    for token, n in rolled.counts.items():
        empirical[token] = n / 4000
    assert 0.5 * float((empirical - dist).abs().sum()) < 0.08
    assert rolled.total_variation == pytest.approx(0.5 * float((empirical - dist).abs().sum()), abs=1e-6)
    assert set(rolled.after) == set(result.accepted_path)
    assert all(abs(sum(row) - 1.0) < 1e-4 for row in rolled.after.values())


def test_overlapping_changes_at_one_frozen_step_each_get_their_own_tree(target, registry, run):
    """A user's events can overlap (a slider released while 'every method' is still computing): each
    change must see the step's caches as the freeze left them, not another change's tree rows."""
    import threading

    lab = FrozenStep(target, registry, "layers:1", step_context(run, 2))
    alone = {m: r.tree.token for m, r in lab.every_method(CONFIGS[0]).items()}
    alone_verdicts = {m: r.accepted_path for m, r in lab.every_method(CONFIGS[0]).items()}
    results, errors = [], []

    def every_method():
        try:
            results.append(lab.every_method(CONFIGS[0]))
        except Exception as err:  # noqa: BLE001 - reported below
            errors.append(err)

    threads = [threading.Thread(target=every_method) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    for rows in results:
        assert {m: r.tree.token for m, r in rows.items()} == alone
        assert {m: r.accepted_path for m, r in rows.items()} == alone_verdicts


def test_confident_depth_counts_drafts_until_the_cumulative_probability_drops():
    from ui.lab_speed import confident_depth

    assert confident_depth([0.9, 0.9, 0.5, 0.9], 0.5) == 3  # 0.9, 0.81 pass; 0.405 < 0.5
    assert confident_depth([0.4], 0.5) == 1
    assert confident_depth([1.0] * 5, 0.5) == 6
    assert confident_depth([], 0.1) == 1


def _curve(verify_per_node: float, call: float) -> CostCurve:
    """A synthetic cost curve: a plain step of 1 s, verification growing by ``verify_per_node`` s a node."""
    sizes = (1, 2, 4, 8, 16, 32, 64, 128)
    return CostCurve(
        plain=1.0,
        verify=tuple((n, 1.0 + verify_per_node * (n - 1)) for n in sizes),
        call=tuple((w, call) for w in (1, 2, 4, 8, 16, 32, 64)),
    )


def test_the_price_of_a_tree_at_a_frozen_step(target, registry, run):
    """Sweep rows carry what a price chart needs, priced by the curve they are given; the cost rule's pick
    at a step grows a bigger tree where nodes are cheap than where they are dear."""
    lab = FrozenStep(target, registry, "layers:1", step_context(run, 2), history=run.steps[:2])
    cheap, dear = _curve(0.0005, 0.001), _curve(0.5, 0.4)
    rows = lab.sweep(CONFIGS[0], "budget", [2, 6, 12], curve=cheap)
    for row in rows:
        assert row["nodes"] == row["budget"] and row["size"] == row["nodes"] + 1
        assert row["committed"] == row["accepted"] + 1 and row["expected"] >= 1.0
        assert row["price"] == pytest.approx(cheap.price(row["size"], row["call_widths"]))
        assert row["call_widths"][0] == 1 and row["stop"] == "cap"
    dear_rows = lab.sweep(CONFIGS[0], "budget", [2, 6, 12], curve=dear)
    assert [r["expected"] for r in dear_rows] == pytest.approx([r["expected"] for r in rows])  # same trees
    assert all(d["price"] > c["price"] for d, c in zip(dear_rows, rows))
    big, small = lab.pick(CONFIGS[0], cheap, cap=24), lab.pick(CONFIGS[0], dear, cap=24)
    assert big.tree.num_drafts > small.tree.num_drafts
    assert small.stop == "cost" and big.tree.num_drafts <= 24
    assert big.price == pytest.approx(cheap.price(len(big.tree), big.call_widths))
    with pytest.raises(ConfigError, match="sizes"):
        lab.pick(TreeConfig(method="static", budget=8), cheap)


def test_a_run_made_here_is_frozen_with_the_models_it_was_made_with(run, monkeypatch):
    """Freeze and "Why this shape?" take the Target and Drafter the run was made with, not what the fields
    hold now; a loaded trace (no such record) takes the fields."""
    import gradio as gr

    from ui import tree_lab
    from ui.session import Session

    asked = []

    def load(spec, progress=None):
        asked.append(spec)
        raise gr.Error("stop before loading")

    monkeypatch.setattr(tree_lab, "load_target", load)
    session = Session(trace=run, specs=("the-run's-target", "layers:1"))
    with pytest.raises(gr.Error):
        tree_lab.frozen_for(session, 1, "typed-since", "ngram")
    session.specs = None
    with pytest.raises(gr.Error):
        tree_lab.frozen_for(session, 1, "typed-since", "ngram")
    assert asked == ["the-run's-target", "typed-since"]


def test_freeze_sets_the_runs_settings_once_and_then_keeps_the_labs(run, monkeypatch):
    """The first Freeze of a run sets the lab's sliders to the run's settings; another step of the same run
    keeps what the sliders hold (EAGLE-2 at N=40 came back as TALON at N=24 at every Freeze) and says so;
    a new run's first Freeze sets them again."""
    import dataclasses

    import gradio as gr

    from ui import tree_lab
    from ui.session import Session

    monkeypatch.setattr(tree_lab, "frozen_for", lambda session, *args: None)
    monkeypatch.setattr(tree_lab, "status_line", lambda session: "Frozen.")
    session = Session(trace=run)
    status, method, budget, *_, shown = tree_lab.freeze(session, 2, "embedded", "layers:1")
    assert status == "Frozen." and method["value"] == "talon" and budget["value"] == 12 and shown == 2
    status, *settings, shown = tree_lab.freeze(session, 3, "embedded", "layers:1")
    assert status == "Frozen." + tree_lab.KEPT_SETTINGS and settings == [gr.skip()] * 6 and shown == 3
    session.trace = dataclasses.replace(run)  # a new run
    status, method, *_ = tree_lab.freeze(session, 1, "embedded", "layers:1")
    assert status == "Frozen." and method["value"] == "talon"


def test_at_a_step_with_one_token_left_the_lab_says_there_is_no_price_to_draw_and_no_winner(target, registry, run):
    """Every tree is the root alone there: the price chart is not drawn (a note says why), and the methods
    table marks a tie, not four winners."""
    from ui import tree_lab
    from ui.session import LabState, Session

    k = len(run.steps) - 1
    frozen = FrozenStep(target, registry, "layers:1", step_context(run, k), depth_limit=0)
    assert frozen.plain_only and not FrozenStep.of_run(target, registry, "layers:1", run, 0).plain_only
    session = Session(trace=run, lab=LabState(run, k, frozen))
    plot, note = tree_lab.price(session, tree_lab.THIS_MACHINE, "talon", 16, 4, 0.1, 5, 4)
    assert plot is None and note.startswith("The run had one new token left at this step")
    table = tree_lab.every_method(session, 16, 4, 0.1, 5, 4).data  # the Styler's numbers
    assert set(table["best"]) == {"★ tie"} and set(table["draft nodes"].astype(str).str[0]) == {"0"}


def test_the_price_note_says_why_the_rule_can_stop_short_of_the_best_n_drawn():
    """The rule grows layer by layer, so its tree can be worth less per price than a bigger N of the chart:
    the note gives both ratios and says why, and says nothing of it when the rule's tree is the best."""
    from ui import tree_lab

    rows = [
        {"budget": 4, "nodes": 4, "expected": 1.8, "price": 1.0, "committed": 2},
        {"budget": 8, "nodes": 8, "expected": 2.4, "price": 1.1, "committed": 3},
    ]
    short = tree_lab.price_note(rows, {"nodes": 5, "expected": 1.9, "price": 1.0}, 8, "this machine", False)
    assert "N=8 has the most expected tokens per unit of price (2.18 a plain step; the rule's tree 1.90)" in short
    assert "one layer at a time" in short
    assert "the stars" in short and "not a point of the lines" in short  # where the chart draws it, and why
    best = tree_lab.price_note(rows, {"nodes": 8, "expected": 2.4, "price": 1.1}, 8, "this machine", False)
    assert "(2.18 a plain step; the rule's tree 2.18)" in best and "one layer at a time" not in best
    assert "No tree pays" not in best  # 2.18 tokens per plain step beat plain decoding's one


def test_the_price_note_says_when_no_tree_beats_plain_decoding_and_why_the_rule_drafts():
    """On a curve where every tree expects under one token per plain step (a GPU's, where a drafter call
    costs a third of a step), the note says plain decoding wins at this step, and why the rule still grows a
    tree: it weighs trees against the root alone after the step's first drafter call."""
    from ui import tree_lab

    rows = [
        {"budget": 4, "nodes": 4, "expected": 1.3, "price": 1.9, "committed": 1},
        {"budget": 8, "nodes": 8, "expected": 1.4, "price": 2.3, "committed": 2},
    ]
    pick = {"nodes": 3, "expected": 1.31, "price": 1.86}
    note = tree_lab.price_note(rows, pick, 8, "GPU (NVIDIA H200)", True, called_root_price=1.46)
    assert "**No tree pays at this step on this curve:**" in note and "at best 0.70" in note  # the rule's tree
    assert "one token for 1.46 plain steps" in note and "first drafter call" in note
    plain = tree_lab.price_note(rows, {"nodes": 0}, 8, "GPU (NVIDIA H200)", True, called_root_price=1.46)
    assert "No tree pays" in plain and "grows a tree all the same" not in plain  # the rule made it a plain step
    paying = tree_lab.price_note(rows, {"nodes": 6, "expected": 2.2, "price": 1.8}, 8, "GPU", True, 1.46)
    assert "No tree pays" not in paying  # the rule's own tree, of its own shape, pays (1.22 a plain step)


REPLAYED = [
    ("layers:1", CONFIGS[0], DecodeConfig(max_new_tokens=30)),
    ("head", dataclasses.replace(CONFIGS[0], budget=64, auto=True), DecodeConfig(max_new_tokens=30)),
    (
        "head",
        dataclasses.replace(CONFIGS[6], budget=64, auto=True),
        DecodeConfig(temperature=0.8, seed=5, max_new_tokens=30),
    ),
    ("head", CONFIGS[3], DecodeConfig(max_new_tokens=30)),
]


def _drafter(kind: str, method: str, target, registry):
    if kind != "head":
        return drafter_for(method, kind, target, registry)
    head = HeadDrafter(registry.get_derived("tiny-head", lambda: None), target)
    return head if method != "hybrid" else hybrid_with_lookup(head, target.vocab_size, device=target.device)


@pytest.mark.parametrize(
    "every_step",
    # the first, a middle and the last step in the fast tier (a replay decodes up to its step, so every
    # step costs half the run's length in decodes); every step with the slow tier
    [pytest.param(False, id="three-steps"), pytest.param(True, id="every-step", marks=pytest.mark.slow)],
)
@pytest.mark.parametrize("kind, cfg, decode", REPLAYED)
def test_a_replayed_run_rebuilds_its_own_tree_at_every_step(target, registry, kind, cfg, decode, every_step):
    """The run decoded again up to a step holds the run's own state there (caches, the drafter's learned
    state, the calibration an auto tree is sized by): the step rebuilt at the run's settings, no deeper
    than the run could draft, is the run's tree with the run's verdict, at every step."""
    curve = _curve(0.05, 0.05) if cfg.auto else None
    run = run_to_end(
        target, _drafter(kind, cfg.method, target, registry), cfg, decode, prompt_ids=prompt_ids(7), cost_curve=curve
    )
    assert len(run.steps) > 3
    last = len(run.steps) - 1
    for k in range(len(run.steps)) if every_step else (0, last // 2, last):
        replayed = replay(run, target, _drafter(kind, cfg.method, target, registry), k)
        lab = FrozenStep.of_run(target, registry, "layers:1", run, k, replayed=replayed)
        got = lab.explore(run_settings(run)[0], k)  # no deeper than the run could draft there, by default
        step = run.steps[k]
        assert (got.tree.token, got.tree.parent, got.accepted_path, got.bonus_token) == (
            step.tree.token,
            step.tree.parent,
            step.accepted_path,
            step.bonus_token,
        ), k
        assert got.expected == pytest.approx(step.expected)  # the replay holds the run's own calibration
    # the other methods at the last step: a hybrid run's tree methods get their own drafter at the context
    rows = lab.every_method(dataclasses.replace(CONFIGS[0], auto=False))
    assert set(rows) == set(LAB_METHODS) and all(not isinstance(r, str) for r in rows.values())


def test_why_this_shape_says_whether_the_first_layer_is_gated(target, registry):
    """Explore's "Why this shape?" note: the root's Top-K has no gate, but K=0 gates the first layer too."""
    from ui import tree_lab
    from ui.session import LabState

    for topk, says, not_says in ((3, "the root's Top-K, with no gate", "K=0"), (0, "K=0", "Top-K, with no gate")):
        cfg = TreeConfig(method="talon", budget=8, topk=topk, mu=0.1)
        drafter = drafter_for("talon", "layers:1", target, registry)
        trace = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=6), prompt_ids=prompt_ids(4))
        frozen = FrozenStep.of_run(target, registry, "layers:1", trace, 0)
        plot, note = tree_lab.gate_view(LabState(trace, 0, frozen), trace, 1)
        assert plot["visible"] and says in note and not_says not in note, note


def test_a_trace_keeps_its_drafters_calibration_prior_and_the_charts_start_from_it(target, registry):
    """The Charts tab's calibrated confidences are the ones the run's cost rule had, the drafter's shipped
    fit included, for a run made here and for the same trace exported and loaded again; a trace without
    the record (or with a garbled one) starts from the raw confidence."""
    from talon.drafters.calibration import Calibration, rows_table
    from talon.trace import RunTrace
    from ui.explore import calibrated_confidences

    drafter = drafter_for("talon", "layers:1", target, registry)
    prior = {("model", 1, b, 0): 0.01 for b in range(14)}  # a pessimistic fit, far from any raw confidence
    drafter.calibration_prior = prior
    trace = run_to_end(target, drafter, CONFIGS[0], DecodeConfig(max_new_tokens=8), prompt_ids=prompt_ids(4))
    loaded = RunTrace.from_json(trace.to_json())
    assert rows_table(loaded.calibration_prior) == prior
    step = trace.steps[0]
    fitted = Calibration(prior).given_parents(step.tree)
    checked = [n for n in range(1, len(step.tree)) if step.tree.parent[n] == 0]
    for shown in (trace, loaded):
        got = calibrated_confidences(shown)
        assert checked and all(got[(0, n)] == pytest.approx(fitted[n]) for n in checked)
    older = dataclasses.replace(loaded, calibration_prior=None)
    raw = Calibration().given_parents(step.tree)
    assert all(calibrated_confidences(older)[(0, n)] == pytest.approx(raw[n]) for n in checked)
    garbled = dataclasses.replace(loaded, calibration_prior=[{"source": "model"}])
    assert calibrated_confidences(garbled) == calibrated_confidences(older)
    plain = run_to_end(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=3), prompt_ids=prompt_ids(4))
    assert plain.calibration_prior is None


def test_a_run_that_cannot_be_replayed_gives_no_state(target, registry, run):
    """Async runs and plain decoding are not replayed; a recorded tree the replay does not reach (a trace
    from elsewhere) ends the replay with nothing borrowed left behind."""
    drafter = drafter_for("talon", "layers:1", target, registry)
    assert replay(run, target, drafter, len(run.steps)) is None  # past the run's steps
    async_run = run_to_end(
        target,
        drafter_for("talon", "layers:1", target, registry),
        CONFIGS[0],
        DecodeConfig(max_new_tokens=20, execution="async"),
        prompt_ids=prompt_ids(4),
    )
    assert replay(async_run, target, drafter, 2) is None
    with pytest.raises(ConfigError, match="cannot be replayed"):
        Replay(async_run, target, drafter, 2)
    altered = dataclasses.replace(run, steps=list(run.steps))
    second = run.steps[1]
    altered.steps[1] = dataclasses.replace(second, committed_ids=[t + 1 for t in second.committed_ids])
    again = Replay(altered, target, drafter_for("talon", "layers:1", target, registry), 3)
    assert again.advance() and again.advance()  # the prefill, then step 1 as recorded
    assert not again.advance() and not again.finished  # step 2 is not the recorded one
    assert again._loop is None  # released
    assert replay(altered, target, drafter_for("talon", "layers:1", target, registry), 3) is None


def test_a_replay_stopped_by_its_server_or_a_listener_keeps_nothing_borrowed(target, registry, run):
    """The server may not run a replay's job (``run`` returns False without calling it) and a listener may
    raise: either way the replay's caches and drafter are released, not left to the garbage collector."""
    seen: list[Replay] = []

    def listener(replay_now: Replay) -> None:
        seen.append(replay_now)
        if replay_now.done >= 1:
            raise RuntimeError("the page went away")

    with pytest.raises(RuntimeError, match="went away"):
        replay(run, target, drafter_for("talon", "layers:1", target, registry), 3, on_advance=listener)
    assert seen[-1]._loop is None
    seen.clear()
    assert (
        replay(
            run,
            target,
            drafter_for("talon", "layers:1", target, registry),
            3,
            run=lambda advance: False,
            on_advance=seen.append,
        )
        is None
    )
    assert seen[-1]._loop is None


def test_a_fresh_measurement_is_drawn_and_read_out():
    """ "Measure this machine again": the curve as the cost chart's rows (every tree size and frontier width
    in plain steps), and a note with the cheapest tree (a root alone is not one) and 16, 32, 64 nodes."""
    from ui import tree_lab

    verify = ((1, 0.020), (2, 0.021), (4, 0.0205), (8, 0.024), (16, 0.028), (32, 0.040), (64, 0.062))
    curve = CostCurve(plain=0.020, verify=verify, call=((1, 0.0012), (8, 0.002)), measured="2026-11-26T15:00")
    frame = tree_lab.curve_frame(curve)
    assert list(frame["component"]) == ["target"] * 7 + ["head"] * 2
    assert frame.set_index(["component", "size"])["ratio"][("target", 32)] == pytest.approx(2.0)
    note = tree_lab.measured_note(curve)
    assert "a plain decoding step 20 ms; the cheapest tree, 4 nodes (root included), costs 1.02 plain steps" in note
    assert "16 nodes 1.40, 32 nodes 2.00, 64 nodes 3.10" in note and "as a reliable curve does" in note
    assert "a drafter call over one node 0.06" in note and "first call" not in note  # not measured: not named
    timed = dataclasses.replace(curve, root=0.0016, observe=0.0002, builder=0.0006)
    assert (
        "a drafter call over one node 0.06, a step's first call 0.08, the tree builder's own work per call 0.03, "
        "a drafted step's bookkeeping 0.01" in tree_lab.measured_note(timed)
    )
    warm = dataclasses.replace(timed, later=((1, 0.0008), (8, 0.0016)))  # a step's third call on
    assert "a drafter call over one node 0.06, 0.04 from a step's third call" in tree_lab.measured_note(warm)
    assert list(tree_lab.curve_frame(warm)["component"]) == ["target"] * 7 + ["head"] * 2 + ["head_later"] * 2
    tiny = dataclasses.replace(curve, root=0.0016, observe=0.00005)  # 0.0025 plain steps: not "0.00"
    assert "a drafted step's bookkeeping under 0.01" in tree_lab.measured_note(tiny)
    busy = CostCurve(plain=0.020, verify=((1, 0.020), (16, 0.040), (32, 0.030)), measured="x")
    assert "looks unreliable" in tree_lab.measured_note(busy)
    shared = dataclasses.replace(curve, other_share=0.35)  # measured while others took 35 % of the CPU
    assert "measured while it was busy**: other processes took 35% of the CPU" in tree_lab.curve_warning(shared)
    assert "measured while it was busy" in tree_lab.measured_note(shared)
    refused = dataclasses.replace(shared, note=NOT_KEPT)
    text = tree_lab.measured_note(refused)
    assert text.startswith("Measured again") and "**Not kept**: other processes took 35% of the CPU" in text
    assert "Runs at N = auto keep the curve measured before" in text and "while it was busy" not in text
    assert tree_lab.curve_warning(dataclasses.replace(curve, other_share=0.05)) == ""  # quiet enough


def test_lab_results_drawn_at_other_settings_are_cleared_and_a_new_step_starts_clean():
    """The sweep, price chart and re-rolls are drawn for a step and settings: a lab setting changed clears
    them with a note (they went on naming the old N and step), a new step frozen clears them, and nothing
    changes where none are on show."""
    import gradio as gr

    from ui import tree_lab
    from ui.session import Session

    session = Session()
    assert tree_lab.results_outdated(session) == (gr.skip(),) * 6
    session.lab_results = True
    assert tree_lab.results_outdated(session) == (None, None, tree_lab.RESULTS_OUTDATED, None, None, "")
    assert tree_lab.results_outdated(session) == (gr.skip(),) * 6  # cleared once
    session.lab_results = True
    assert tree_lab.results_cleared(session) == (None, None, "", None, None, "") and not session.lab_results


def test_a_sweep_that_ends_after_the_settings_changed_is_dropped(target, registry, run, monkeypatch):
    """A sweep (or price chart, re-roll) drawn while a lab setting changed ended after the change had
    cleared the results, and stayed on show naming the old N: it is dropped now."""
    import gradio as gr

    from ui import tree_lab
    from ui.session import LabState, Session

    frozen = FrozenStep(target, registry, "layers:1", step_context(run, 0))
    session = Session(trace=run, lab=LabState(run, 0, frozen))
    sweep = ("budget", "talon", 8, 3, 0.05, 5, 4)
    assert tree_lab.sweep(session, *sweep) != gr.skip() and session.lab_results
    points = FrozenStep.sweep

    def changed_meanwhile(*args, **kwargs):
        tree_lab.results_outdated(session)  # N moved while the sweep was drawn
        return points(*args, **kwargs)

    monkeypatch.setattr(FrozenStep, "sweep", changed_meanwhile)
    assert tree_lab.sweep(session, *sweep) == gr.skip() and not session.lab_results


def test_the_lab_says_when_it_grows_a_loaded_traces_trees_with_another_drafter(target, registry, run):
    """A loaded trace is frozen with the Drafter field's model: where that is not the drafter the run was
    drafted with, the status line says the lab's trees are not the run's."""
    from ui import tree_lab
    from ui.session import LabState, Session

    for spec, warned in (("layers:1", False), ("ngram", True)):
        frozen = FrozenStep(target, registry, spec, step_context(run, 0))
        session = Session(trace=run, lab=LabState(run, 0, frozen))
        status = tree_lab.status_line(session)
        assert ("the lab grows its trees with" in status) is warned, spec
        if warned:
            assert run.drafter in status and frozen.drafter_name("talon") in status


def test_each_reroll_press_draws_afresh(target, registry, run):
    """Re-roll drew the same 200 samples at every press (its seed was the context's length): each press
    at a step draws its own now, and the lab's results count as on show."""
    from ui import tree_lab
    from ui.session import LabState, Session

    frozen = FrozenStep(target, registry, "layers:1", step_context(run, 0), temperature=1.0)
    session = Session(trace=run, lab=LabState(run, 0, frozen, last=frozen.explore(CONFIGS[0])))
    counts = [tree_lab.reroll(session)[0] for _ in range(3)]
    histograms = [tuple(tuple(bar.y) for bar in fig.data) for fig in counts]
    assert len(set(histograms)) > 1 and session.lab_results


def test_the_lab_commits_what_the_run_would_cut_at_an_end_of_sequence_token(target, registry, run):
    """A rebuilt step whose accepted path holds an end-of-sequence token commits up to it, as the run's
    loop does (the price chart's 'committed' counts those tokens), not the whole path and the bonus."""
    k = max(range(len(run.steps)), key=lambda i: len(run.steps[i].committed_ids))
    step = run.steps[k]
    assert len(step.committed_ids) >= 3
    lab = FrozenStep.of_run(target, registry, "layers:1", run, k)
    assert lab.explore(CONFIGS[0], k).committed_ids == step.committed_ids
    config = target.model.generation_config
    saved = config.eos_token_id
    config.eos_token_id = [step.committed_ids[1]]  # the second token the step committed ends the output now
    try:
        got = lab.explore(CONFIGS[0], k)
        assert got.committed_ids == step.committed_ids[:2]
        row = lab.sweep(CONFIGS[0], "budget", [CONFIGS[0].budget])[0]
        assert row["committed"] == 2 and row["accepted"] >= 2
    finally:
        config.eos_token_id = saved


def test_a_hybrid_run_frozen_without_replay_makes_its_drafter_with_the_step(target, registry, monkeypatch):
    """``FrozenStep.of_run`` (the lab's queued job) makes and prefills a hybrid run's drafter, so the lab's
    status line, which reads its name outside the queue, runs no model forward."""
    from talon.engine import frozen_step

    cfg = TreeConfig(method="hybrid", budget=12, topk=3, mu=0.05)
    drafter = drafter_for("hybrid", "layers:1", target, registry)
    hybrid = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=12), prompt_ids=prompt_ids(4))
    lab = FrozenStep.of_run(target, registry, "layers:1", hybrid, 1)  # prefilled, not replayed
    monkeypatch.setattr(frozen_step, "drafter_for", lambda *a, **k: pytest.fail("a drafter made outside the job"))
    assert lab.drafter_name("hybrid") == hybrid.drafter
