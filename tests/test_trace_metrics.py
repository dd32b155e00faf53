"""Traces (JSON round trip, built by hand: no model), metric definitions, and configuration validation."""

from __future__ import annotations

import json
import math

import pytest
import torch

from talon.config import METHODS, ConfigError, DecodeConfig, ModelSpec, TreeConfig
from talon.engine.builders import TalonBuilder
from talon.engine.verify import greedy_accept
from talon.metrics import (
    acceptance_by_depth,
    delta,
    draft_share,
    mat,
    speedup,
    summarize,
    tokens_per_second,
    trace_json,
)
from talon.trace import TRACE_FORMAT, RunTrace, StepRecord
from talon.tree import NO_TOKEN, DraftTree
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
    tree = TalonBuilder(8, 2, 0.1).build(drafter, [4]).tree
    argmax = [tree.token[1]] + [0] * (len(tree) - 1)
    step = make_step(3, tree, argmax, forwards=len(drafter.calls), start=1.6, draft_s=0.01, verify_s=0.02)
    trace = hand_trace(hand_steps() + [step])
    for indent in (None, 2):
        text = trace.to_json(indent=indent)
        back = RunTrace.from_json(text)
        assert back == trace
        assert back.steps[3].tree == tree
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
        ("{not json", "Not valid JSON"),
        ("[1, 2, 3]", "JSON object"),
        (json.dumps({"format": 999}), "format"),
        (json.dumps({"prompt": "x"}), "format"),
    ],
)
def test_from_json_rejects_bad_input(text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        RunTrace.from_json(text)


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
    assert ModelSpec(target="a", drafter="b").to_dict() == {"target": "a", "drafter": "b"}
    assert math.isclose(TreeConfig(mu=0.5).mu, 0.5)
