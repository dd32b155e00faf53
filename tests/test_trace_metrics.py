"""Traces (JSON round trip, built by hand: no model), metric definitions, and configuration validation."""

from __future__ import annotations

import json
import math
from dataclasses import replace

import pytest
import torch

from talon.config import METHODS, ConfigError, DecodeConfig, ModelSpec, TreeConfig
from talon.engine.builders import TalonBuilder
from talon.engine.verify import greedy_accept
from talon.metrics import (
    acceptance_by_depth,
    acceptance_per_depth,
    calibration_error,
    chain_collapsed,
    collapsed_steps,
    delta,
    draft_share,
    mat,
    mean_expected,
    mean_realised,
    mean_sq_miss,
    paired_verdict,
    reliability_points,
    reliability_table,
    representative_step,
    shape_stats,
    speedup,
    spread,
    summarize,
    tokens_per_second,
    trace_json,
)
from talon.trace import TRACE_FORMAT, RunTrace, StepRecord
from talon.tree import NO_TOKEN, DraftTree, GateLayer
from tests.toy import TableDrafter, random_fn


def logits_with_argmax(argmax: list[int], vocab: int = 12) -> torch.Tensor:
    g = torch.Generator().manual_seed(len(argmax))
    logits = torch.randn(len(argmax), vocab, generator=g)
    logits[torch.arange(len(argmax)), torch.tensor(argmax)] = 10.0
    return logits


def make_step(
    index: int,
    tree: DraftTree,
    argmax: list[int],
    forwards: int,
    start: float,
    draft_s: float,
    verify_s: float,
    cut: int | None = None,
) -> StepRecord:
    """A StepRecord as the decode loop would write it, from a greedy verdict on fake target logits.
    ``cut`` truncates the committed tokens (as EOS / max-new-tokens do)."""
    v = greedy_accept(tree, logits_with_argmax(argmax))
    committed = [tree.token[i] for i in v.accepted_path[1:]] + [v.bonus_token]
    if cut is not None:
        committed = committed[:cut]
    words = {t: w for t, w in enumerate(["the", " é", " 日本", "\n", " ✓", " a", " b", " c", " d", " e", " f", " g"])}
    return StepRecord(
        index=index,
        tree=tree,
        status=v.status,
        accepted_path=v.accepted_path,
        bonus_token=v.bonus_token,
        target_token=v.target_token,
        target_prob=v.target_prob,
        committed_ids=committed,
        committed_text="".join(words[t] for t in committed),
        node_text=[words[t] for t in tree.token],
        target_text=[words[t] if t != NO_TOKEN else "" for t in v.target_token],
        draft_start=start,
        draft_seconds=draft_s,
        verify_start=start + draft_s,
        verify_seconds=verify_s,
        drafter_forwards=forwards,
    )


def chain(root: int, tokens: list[int]) -> DraftTree:
    t = DraftTree.with_root(root)
    for i, tok in enumerate(tokens):
        t.add(i, tok, -0.5 * (i + 1))
    return t


def hand_steps() -> list[StepRecord]:
    """Three steps with known outcomes:

    A: chain 1-2-3 (depth 3), target argmax 1, 2, 9: accepts depth 2, commits [1, 2, 9];
    B: one draft 5 (depth 1), target wants 7: accepts nothing, commits [7];
    C: root -> 1 -> 2 and root -> 3 (depth 2), target 1, 2, then 4: accepts depth 2, commits [1, 2, 4]."""
    a = make_step(0, chain(0, [1, 2, 3]), [1, 2, 9, 0], forwards=3, start=0.5, draft_s=0.1, verify_s=0.3)
    b = make_step(1, chain(9, [5]), [7, 0], forwards=1, start=0.9, draft_s=0.05, verify_s=0.25)
    tc = DraftTree.with_root(7)
    n1 = tc.add(0, 1, -0.2)
    tc.add(n1, 2, -0.4)
    tc.add(0, 3, -1.5)
    c = make_step(2, tc, [1, 2, 4, 0], forwards=2, start=1.2, draft_s=0.15, verify_s=0.2)
    return [a, b, c]


def hand_trace(steps: list[StepRecord] | None = None) -> RunTrace:
    cfg = TreeConfig(method="talon", budget=8, topk=2, mu=0.1)
    return RunTrace(
        prompt="Hi ✓ — 日本",
        prompt_ids=[11, 4, 0],
        tree_config=dict(vars(cfg)),
        decode_config=dict(vars(DecodeConfig(temperature=0.0, seed=3, max_new_tokens=20))),
        target="toy-target",
        drafter="table",
        device="cpu",
        prefill_seconds=0.5,
        steps=hand_steps() if steps is None else steps,
        stop_reason="max_new_tokens",
    )


# ---- trace round trip -----------------------------------------------------------------------------------
def test_hand_steps_are_what_the_docstring_says() -> None:
    a, b, c = hand_steps()
    assert (a.accepted_path, a.committed_ids, a.accepted_tokens) == ([0, 1, 2], [1, 2, 9], 2)
    assert (b.accepted_path, b.committed_ids, b.accepted_tokens) == ([0], [7], 0)
    assert (c.accepted_path, c.committed_ids, c.accepted_tokens) == ([0, 1, 2], [1, 2, 4], 2)
    assert a.layer_widths == [1, 1, 1, 1] and c.layer_widths == [1, 2, 1]


def test_trace_json_round_trip_with_builder_tree() -> None:
    """A trace holding a real TALON tree (built from a table drafter) plus the hand steps survives
    to_json / from_json exactly, non-ASCII text included."""
    drafter = TableDrafter(12, random_fn(12, 5))
    built = TalonBuilder(8, 2, 0.1).build(drafter, [4], record_gate=True)
    tree = built.tree
    argmax = [tree.token[1]] + [0] * (len(tree) - 1)
    step = make_step(3, tree, argmax, forwards=len(drafter.calls), start=1.6, draft_s=0.01, verify_s=0.02)
    step.gate = built.gate  # the Tree lab's gate chart of a loaded step is drawn from it
    trace = hand_trace(hand_steps() + [step])
    for indent in (None, 2):
        text = trace.to_json(indent=indent)
        back = RunTrace.from_json(text)
        assert back == trace
        assert back.steps[3].tree == tree
        assert back.steps[3].gate == built.gate and all(isinstance(g, GateLayer) for g in back.steps[3].gate)
        assert back.output_text == trace.output_text and "日本" in text  # ensure_ascii=False
    d = json.loads(trace.to_json())
    assert d["format"] == TRACE_FORMAT
    assert d["output_text"] == trace.output_text
    exported = json.loads(trace_json(trace))
    assert exported["summary"] == json.loads(json.dumps(summarize(trace)))
    assert RunTrace.from_json(trace_json(trace)) == trace
    assert d["steps"][3]["layer_widths"] == tree.layer_widths()
    assert d["steps"][3]["tree"] == tree.to_dict()


def test_trace_derived_properties() -> None:
    trace = hand_trace()
    assert trace.output_ids == [1, 2, 9, 7, 1, 2, 4]
    assert trace.output_text == " é 日本 e c é 日本 ✓"
    assert trace.output_text == "".join(s.committed_text for s in trace.steps)
    assert trace.seconds == pytest.approx(0.5 + (0.1 + 0.3) + (0.05 + 0.25) + (0.15 + 0.2))


def test_step_round_trip_ignores_derived_fields() -> None:
    step = hand_steps()[2]
    d = step.to_dict()
    assert d["layer_widths"] == [1, 2, 1]
    d["layer_widths"] = [99]  # derived: ignored on load
    assert StepRecord.from_dict(json.loads(json.dumps(d))) == step


@pytest.mark.parametrize(
    "text,match",
    [
        ("{not json", "not valid JSON"),
        ("[1, 2, 3]", "JSON object"),
        (json.dumps({"format": 999}), "format"),
        (json.dumps({"prompt": "x"}), "format"),
        (json.dumps({"format": 1, "tree_config": "talon", "decode_config": {}}), "tree_config must be an object"),
    ],
)
def test_from_json_rejects_bad_input(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RunTrace.from_json(text)


def test_from_json_rejects_a_tree_that_breaks_the_contract() -> None:
    # A hand-edited or corrupt upload: a node whose parent comes after it is refused, not drawn.
    d = json.loads(hand_trace().to_json())
    d["steps"][0]["tree"]["parent"][1] = 3
    with pytest.raises(ValueError):
        RunTrace.from_json(json.dumps(d))


def test_from_json_rejects_missing_field() -> None:
    d = json.loads(hand_trace().to_json())
    del d["steps"][1]["bonus_token"]
    with pytest.raises(ValueError, match="missing or mistypes"):
        RunTrace.from_json(json.dumps(d))
    d = json.loads(hand_trace().to_json())
    del d["device"]
    with pytest.raises(ValueError):
        RunTrace.from_json(json.dumps(d))


# ---- metrics ------------------------------------------------------------------------------------------
def test_mat_counts_bonus_token() -> None:
    """MAT = committed tokens per target forward, bonus included: (3 + 1 + 3) / 3."""
    steps = hand_steps()
    assert mat(steps) == pytest.approx(7 / 3)
    assert mat(steps) == pytest.approx(sum(s.accepted_tokens + 1 for s in steps) / len(steps))
    assert mat([]) == 0.0


def test_mat_of_autoregressive_is_one_and_uses_committed_ids() -> None:
    ar = [make_step(i, DraftTree.with_root(i), [i + 1], 0, i, 0.0, 0.1) for i in range(5)]
    assert mat(ar) == 1.0 and delta(ar) == 0.0
    assert acceptance_by_depth(ar) == []
    # A step cut at EOS commits fewer tokens than path + bonus; MAT counts what was committed.
    cut = make_step(0, chain(0, [1, 2, 3]), [1, 2, 3, 5], 3, 0.0, 0.1, 0.1, cut=2)
    assert cut.committed_ids == [1, 2] and cut.accepted_tokens == 3
    assert mat([cut]) == 2.0


def test_the_calibration_means_by_hand() -> None:
    steps = hand_steps()  # realised 3, 1, 3 committed tokens
    assert mean_expected(steps) is None and mean_sq_miss(steps) is None  # no expectations recorded
    for step, expected in zip(steps, (2.5, 1.5, 4.0)):
        step.expected = expected
    assert mean_expected(steps) == pytest.approx(8.0 / 3) and mean_realised(steps) == pytest.approx(7.0 / 3)
    assert mean_sq_miss(steps) == pytest.approx((0.25 + 0.25 + 1.0) / 3)


def test_delta_is_drafter_forwards_per_target_forward() -> None:
    assert delta(hand_steps()) == pytest.approx((3 + 1 + 2) / 3)
    assert delta([]) == 0.0


def test_acceptance_by_depth_definition() -> None:
    """rate[d-1] = share of the steps whose tree reached depth d that accepted a node at depth d:
    d=1: A, B, C reached, A and C accepted -> 2/3; d=2: A, C reached, both accepted -> 1;
    d=3: only A reached, it stopped at 2 -> 0."""
    assert acceptance_by_depth(hand_steps()) == pytest.approx([2 / 3, 1.0, 0.0])
    assert acceptance_by_depth([]) == []


def test_timing_metrics() -> None:
    trace = hand_trace()
    seconds = 0.5 + 0.4 + 0.3 + 0.35
    assert tokens_per_second(trace) == pytest.approx(7 / seconds)
    assert draft_share(trace) == pytest.approx(0.3 / 1.05)
    assert speedup(3.0, 1.5) == 2.0 and speedup(3.0, 0.0) == 0.0
    empty = hand_trace(steps=[])
    empty.prefill_seconds = 0.0
    assert tokens_per_second(empty) == 0.0 and draft_share(empty) == 0.0


def test_summarize() -> None:
    trace = hand_trace()
    s = summarize(trace)
    assert s["new_tokens"] == 7 and s["target_forwards"] == 3 and s["draft_forwards"] == 6
    assert s["mat"] == pytest.approx(7 / 3) and s["delta"] == pytest.approx(2.0)
    assert s["mean_tree_nodes"] == pytest.approx((3 + 1 + 3) / 3)
    assert s["acceptance_by_depth"] == pytest.approx([2 / 3, 1.0, 0.0])
    assert s["seconds"] == pytest.approx(trace.seconds)
    assert s["tokens_per_second"] == pytest.approx(tokens_per_second(trace))
    assert s["draft_share"] == pytest.approx(draft_share(trace))
    empty = summarize(hand_trace(steps=[]))
    assert empty["mat"] == 0.0 and empty["mean_tree_nodes"] == 0.0 and empty["acceptance_by_depth"] == []


# ---- configuration validation ---------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"budget": 0}, r"Budget N .*>= 1 \(got 0\)"),
        ({"budget": -5}, r"Budget N"),
        ({"budget": 2.5}, r"Budget N"),
        ({"topk": 0, "method": "eagle2"}, r"EAGLE-2 needs root width K >= 1"),
        ({"topk": -1}, r"Root width K .*>= 0"),
        ({"mu": 0.0}, r"mu must be in \(0, 1\] \(got 0.0\)"),
        ({"mu": -0.1}, r"mu"),
        ({"mu": 1.0001}, r"mu"),
        ({"mu": float("nan")}, r"mu"),
        ({"mu": "0.03"}, r"mu"),
        ({"method": "beam"}, r"Unknown method 'beam'.*talon"),
        ({"method": "TALON"}, r"Unknown method"),
        ({"depth": 0}, r"Depth"),
        ({"gamma": 0}, r"gamma"),
        ({"static_paths": ((),)}, r"non-empty"),
        ({"static_paths": ((0,), (0, -1))}, r"ranks >= 0"),
        ({"static_paths": ((0,), (0, 1.0))}, r"ranks >= 0"),
        ({"static_paths": ((0, 1),)}, r"parent path"),
        ({"static_paths": ((1, 0), (1,))}, r"parent path"),
        ({"static_paths": ((0,), (1,), (0,))}, r"listed twice"),
    ],
)
def test_tree_config_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        TreeConfig(**kwargs)


@pytest.mark.parametrize("field", ["budget", "topk", "depth", "gamma"])
def test_tree_config_rejects_booleans(field: str) -> None:
    with pytest.raises(ConfigError):
        TreeConfig(**{field: True})


@pytest.mark.parametrize(
    "kwargs,match",
    [
        ({"temperature": -0.5}, r"Temperature must be between 0 and 5 \(got -0.5\)"),
        ({"temperature": 5.5}, r"Temperature"),
        ({"temperature": float("nan")}, r"Temperature"),
        ({"temperature": "1"}, r"Temperature"),
        ({"max_new_tokens": 0}, r"Max new tokens"),
        ({"seed": 1.5}, r"Seed"),
    ],
)
def test_decode_config_errors(kwargs: dict, match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        DecodeConfig(**kwargs)


def test_config_error_is_value_error_and_valid_configs_pass() -> None:
    assert issubclass(ConfigError, ValueError)
    for method in METHODS:
        TreeConfig(method=method)
    TreeConfig(mu=1.0)
    TreeConfig(mu=1e-9, budget=1, topk=1)
    TreeConfig(static_paths=((0,), (1,), (0, 0), (0, 0, 2)))
    DecodeConfig(temperature=0)
    DecodeConfig(temperature=5.0)
    d = TreeConfig()
    assert (d.method, d.budget, d.topk, d.mu) == ("talon", 16, 10, 0.03)
    assert ModelSpec(target="a", drafter="b").to_dict() == {"target": "a", "drafter": "b", "datastore": None}
    assert math.isclose(TreeConfig(mu=0.5).mu, 0.5)


# ---- acceptance per depth, chains, shape, representative step, reliability, repeated timings ------------
def leaf_step() -> StepRecord:
    """D: root -> 1 -> 2 (a chain of 2) and root -> 3; target 1, 2, then 8: everything accepted, the
    accepted node at depth 2 is a leaf (the tree ran out), commits [1, 2, 8]."""
    t = DraftTree.with_root(4)
    n1 = t.add(0, 1, -0.1)
    t.add(n1, 2, -0.3)
    t.add(0, 3, -2.0)
    return make_step(3, t, [1, 2, 8, 0], forwards=2, start=1.6, draft_s=0.1, verify_s=0.2)


def test_acceptance_per_depth_both_rates_by_hand() -> None:
    """With A, B, C (hand_steps) and D (leaf_step):
    d=1: reached A B C D; accepted A C D; checked (root has children) A B C D -> 3/4 and 3/4;
    d=2: reached A C D; accepted A C D; checked: A (node 1 has child 2), C (node 1 -> 2), D (1 -> 2) -> 3/3, 3/3;
    d=3: reached A only; accepted none; checked: A's node 2 has child 3 -> 1; ran out: C, D (their
    accepted node at depth 2 is a leaf) -> rate 0/1, conditional 0/1."""
    rows = acceptance_per_depth([*hand_steps(), leaf_step()])
    got = [(r["reached"], r["accepted"], r["checked"], r["ran_out"]) for r in rows]
    assert got == [(4, 3, 4, 0), (3, 3, 3, 0), (1, 0, 1, 2)]
    assert [r["rate"] for r in rows] == pytest.approx([0.75, 1.0, 0.0])
    assert [r["conditional"] for r in rows] == pytest.approx([0.75, 1.0, 0.0])
    assert [r["rate"] for r in rows] == pytest.approx(acceptance_by_depth([*hand_steps(), leaf_step()]))


def test_the_conditional_rate_leaves_out_steps_that_failed_earlier() -> None:
    """Two chains of 3: one accepts depth 1 only, one accepts everything; the reached-rate at depth 2 is
    1/2, the conditional rate counts only the step whose depth-1 node was accepted: 1/2 as well; at depth 3
    the reached-rate is 1/2 and the conditional 1/1 (the first step never got there)."""
    a = make_step(0, chain(0, [1, 2, 3]), [1, 9, 0, 0], forwards=3, start=0.0, draft_s=0.1, verify_s=0.1)
    b = make_step(1, chain(0, [1, 2, 3]), [1, 2, 3, 5], forwards=3, start=0.3, draft_s=0.1, verify_s=0.1)
    rows = acceptance_per_depth([a, b])
    assert [r["rate"] for r in rows] == pytest.approx([1.0, 0.5, 0.5])
    assert [r["conditional"] for r in rows] == pytest.approx([1.0, 0.5, 1.0])
    assert acceptance_per_depth([]) == []


def test_chain_collapse_is_a_single_path_below_the_first_layer() -> None:
    wide_root_chain = DraftTree.with_root(0)
    first = [wide_root_chain.add(0, t, -0.5) for t in (1, 2, 3)]
    n = wide_root_chain.add(first[0], 4, -0.5)
    wide_root_chain.add(n, 5, -0.5)
    step = make_step(0, wide_root_chain, [1, 4, 0, 0, 5, 0], 3, 0.0, 0.1, 0.1)  # argmax per node
    assert chain_collapsed(step)  # [3, 1, 1]: one path below the root's three children
    assert chain_collapsed(make_step(0, chain(0, [1, 2, 3]), [1, 2, 3, 0], 3, 0.0, 0.1, 0.1))
    assert not chain_collapsed(make_step(0, chain(0, [1, 2]), [1, 2, 0], 2, 0.0, 0.1, 0.1))  # one layer below
    branchy = DraftTree.with_root(0)
    a = branchy.add(0, 1, -0.5)
    branchy.add(a, 2, -0.5)
    b = branchy.add(a, 3, -0.5)
    branchy.add(b, 4, -0.5)
    assert not chain_collapsed(make_step(0, branchy, [1, 3, 0, 4, 0], 3, 0.0, 0.1, 0.1))  # [1, 2, 1]
    trace = hand_trace([step])
    assert collapsed_steps(trace) == [0]
    trace.tree_config["method"] = "chain"  # a chain by design is not a collapse
    assert collapsed_steps(trace) == []


def test_percentile_takes_the_value_nearest_by_rank() -> None:
    from talon.metrics import percentile

    values = [40, 10, 30, 20, 50]
    assert [percentile(values, q) for q in (0.0, 0.25, 0.5, 0.9, 1.0)] == [10, 20, 30, 50, 50]
    assert percentile([4, 1, 3, 2], 0.9) == 4 and percentile([7.5], 0.5) == 7.5  # rank 2.7 is nearest 3
    assert math.isnan(percentile([], 0.5))


def test_shape_stats_and_the_representative_step() -> None:
    steps = [*hand_steps(), leaf_step()]  # depths 3, 1, 2, 2; drafts 3, 1, 3, 3; widest 1, 1, 2, 2
    st = shape_stats(steps)
    assert st["mean_depth"] == pytest.approx(2.0) and st["mean_nodes"] == pytest.approx(2.5)
    assert st["mean_widest"] == pytest.approx(1.5) and st["max_widest"] == 2 and st["plain_share"] == 0.0
    # median depth 2 (C and D); D is the last step, so C
    assert representative_step(steps) == 2
    plain = make_step(4, DraftTree.with_root(3), [5], 0, 2.0, 0.0, 0.1)
    assert shape_stats([*steps, plain])["plain_share"] == pytest.approx(0.2)
    assert representative_step([]) == 0


def test_the_representative_step_shows_an_acceptance_where_the_run_usually_makes_one() -> None:
    # Three one-layer steps: a wide one whose five drafts were all rejected and two narrower ones that
    # accepted a draft (the run's median).  The typical step is a narrow accepted one, not the widest.
    wide = DraftTree.with_root(0)
    for token in (1, 2, 3, 4, 5):
        wide.add(0, token, -1.0)
    rejected = make_step(0, wide, [9, 0, 0, 0, 0, 0], 1, 0.0, 0.1, 0.1)
    accepted = [make_step(k, chain(0, [1, 2]), [1, 3, 0], 1, 0.0, 0.1, 0.1) for k in (1, 3)]
    pair = DraftTree.with_root(0)
    pair.add(0, 1, -0.5)
    pair.add(0, 2, -0.9)
    narrow = make_step(2, pair, [1, 0, 0], 1, 0.0, 0.1, 0.1)
    steps = [rejected, accepted[0], narrow, accepted[1]]
    assert [s.tree.max_depth for s in steps] == [1, 2, 1, 2] and [s.accepted_tokens for s in steps] == [0, 1, 1, 1]
    assert representative_step(steps) == 2  # depth 1 (lower median), accepted 1 (the run's median), not step 0
    # the last step is passed over among equals, even where it would win every tie-break (more drafts)
    wider = DraftTree.with_root(0)
    for token in (1, 2, 4):
        wider.add(0, token, -1.0)
    last = make_step(4, wider, [1, 0, 0, 0], 1, 0.0, 0.1, 0.1)
    assert last.accepted_tokens == 1 and last.tree.num_drafts > narrow.tree.num_drafts
    assert representative_step([narrow, last]) == 2
    assert representative_step([last, replace(narrow, index=5)]) == 4  # not last: it wins on its drafts


def test_a_run_that_accepts_in_half_its_steps_opens_on_an_accepted_step() -> None:
    """Accepted drafts 0, 1, 0, 1 at one depth: the upper median (1) picks step 1; the lower median
    would open the run on a tree whose every draft was rejected."""
    one = DraftTree.with_root(0)
    one.add(0, 1, -0.5)
    steps = [make_step(k, one, [1 if k % 2 else 9, 0], 1, 0.0, 0.1, 0.1) for k in range(4)]
    assert [s.accepted_tokens for s in steps] == [0, 1, 0, 1]
    assert representative_step(steps) == 1


def test_the_step_around_the_mean_depth_shows_what_a_comparison_of_means_states() -> None:
    """Compare prompts compares mean depths: a code run of depths 1, 1, 1, 3, 3, 4 (mean 2.17) opened on
    a median step of depth 1, like a chat run's, and the two pictures looked alike beside "2.13 against
    1.19".  Around the mean it opens on depth 3, not the last step; a tie goes to the lower depth."""
    steps = [
        make_step(k, chain(0, list(range(1, d + 1))), [9] * (d + 1), 0, 0.0, 0.1, 0.1)
        for k, d in enumerate([1, 1, 1, 3, 4, 3])
    ]
    assert [s.tree.max_depth for s in steps] == [1, 1, 1, 3, 4, 3]
    assert steps[representative_step(steps)].tree.max_depth == 1
    assert representative_step(steps, around="mean") == 3  # depth 3, and not the last step (5)
    tie = steps[:2] + [steps[3]]  # depths 1, 1, 3: mean 1.67 is nearer 1 (0.67) than 3 (1.33)
    assert tie[representative_step(tie, around="mean")].tree.max_depth == 1
    even = [steps[0], steps[3]]  # depths 1, 3: mean 2 is as near to both: the lower
    assert representative_step(even, around="mean") == 0


def test_reliability_bins_every_checked_node_of_the_run() -> None:
    steps = [*hand_steps(), leaf_step()]
    draft = reliability_points(steps, "draft")
    checked = sum(1 for s in steps for n in range(1, len(s.tree)) if s.tree.parent[n] in s.accepted_path)
    assert len(draft) == checked
    assert sum(ok for _, ok, _ in draft) == sum(s.accepted_tokens for s in steps)
    path = reliability_points(steps, "path")
    assert len(path) == sum(s.tree.num_drafts for s in steps)
    rows = reliability_table(draft)
    assert sum(r["count"] for r in rows) == checked and sum(r["hits"] for r in rows) == sum(ok for _, ok, _ in draft)
    for r in rows:
        assert r["low"] <= r["confidence"] <= r["high"] and r["observed"] == pytest.approx(r["hits"] / r["count"])
    assert calibration_error([{"count": 2, "observed": 1.0, "confidence": 0.5}]) == pytest.approx(0.5)
    assert calibration_error([]) == 0.0
    with pytest.raises(ValueError, match="kind"):
        reliability_points(steps, "nope")


def test_spread_and_the_paired_verdict() -> None:
    assert spread([3.0, 1.0, 2.0]) == {"median": 2.0, "low": 1.0, "high": 3.0, "n": 3}
    assert spread([1.0, 2.0])["median"] == 1.5 and spread([])["n"] == 0
    assert paired_verdict([1.2, 1.1, 1.3]) == "A"
    assert paired_verdict([0.8, 0.9]) == "B"
    assert paired_verdict([1.01, 0.99, 1.0]) == "same"
    assert paired_verdict([1.2, 0.8, 1.1]) == "unclear"
    # Faster every time, once within the tolerance: not a tie and not "the repetitions disagree".
    assert paired_verdict([0.86, 0.97, 0.9]) == "B narrowly"
    assert paired_verdict([1.2, 1.01, 1.1]) == "A narrowly"
    assert paired_verdict([1.02, 1.01]) == "same"
    assert paired_verdict([]) == "unclear"


def test_the_noise_a_reroll_expects_follows_its_distribution() -> None:
    # The note beside the re-roll chart compares the measured total variation with what exact sampling
    # gives: near 0 for a peaked distribution, larger for a flat one, and close to a simulation.
    import random
    from collections import Counter

    from talon.engine.frozen_step import Reroll

    peaked = Reroll(1.0, Counter({0: 200}), [1.0, 0.0, 0.0], {})
    assert peaked.noise_total_variation == 0.0 and peaked.total_variation == 0.0
    flat = [0.25] * 4
    rng = random.Random(0)
    simulated = []
    for _ in range(400):
        counts = Counter(rng.choices(range(4), flat, k=200))
        simulated.append(Reroll(1.0, counts, flat, {}).total_variation)
    expected = Reroll(1.0, Counter({0: 200}), flat, {}).noise_total_variation
    assert expected == pytest.approx(sum(simulated) / len(simulated), rel=0.1)
    assert 0.0 < Reroll(1.0, Counter({0: 200}), [0.98, 0.02], {}).noise_total_variation < expected / 3
    # exact, not a normal approximation: a long tail of unlikely tokens (a whole vocabulary at T=1) adds
    # about its mass, where the approximation summed to several times the bound of 1
    from talon.engine.frozen_step import binomial_mean_deviation

    for n, p in ((10, 0.3), (200, 0.005), (200, 0.64)):
        brute = sum(math.comb(n, k) * p**k * (1 - p) ** (n - k) * abs(k - n * p) for k in range(n + 1))
        assert binomial_mean_deviation(n, p) == pytest.approx(brute, rel=1e-9)
    tail = 100_000
    always_top = Reroll(1.0, Counter({0: 200}), [0.5, 0.3] + [0.2 / tail] * tail, {})
    assert 0.2 < always_top.noise_total_variation < 0.25 < always_top.total_variation == pytest.approx(0.5)
    # the verdict's bound: what 99 of 100 exact samplers stay under, simulated; a sampler that always
    # emits the likeliest token is above it, exact draws are under it about 99 times in 100
    assert always_top.noise_bound() < always_top.total_variation
    peaked = [0.6, 0.3] + [0.1 / 500] * 500
    bound = Reroll(1.0, Counter({0: 200}), peaked, {}).noise_bound()
    over = sum(
        Reroll(1.0, Counter(rng.choices(range(len(peaked)), peaked, k=200)), peaked, {}).total_variation > bound
        for _ in range(300)
    )
    assert over <= 12  # about 3 expected
