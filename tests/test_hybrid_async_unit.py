"""Fast tier for hybrid drafting and async execution: model-free drafters, toy trees, synthetic traces."""

from __future__ import annotations

import copy
import math
from dataclasses import replace

import pytest
import torch

from talon import metrics
from talon.drafters.datastore import build_datastore
from talon.drafters.hybrid import HybridDrafter
from talon.drafters.ngram import MAX_CONTINUATIONS, NgramDrafter
from talon.engine.builders import Eagle2Builder, TalonBuilder
from talon.engine.speculation import best_outside, likely_outcome
from talon.trace import RunTrace, StepRecord
from talon.tree import SOURCE_MODEL, SOURCE_RETRIEVAL, DraftTree, Verdict
from tests.toy import TableDrafter
from viz import charts, summary

VOCAB = 12


def _one_hot(token: int, p: float = 0.9) -> torch.Tensor:
    row = torch.full((VOCAB,), math.log((1 - p) / (VOCAB - 1)))
    row[token] = math.log(p)
    return row


# ---- n-gram drafter: cropping to the common prefix, and the datastore ------------------------------------
def test_ngram_crops_its_index_back_to_the_common_prefix_exactly():
    d = NgramDrafter(VOCAB, max_ngram=3)
    d.start([1, 2, 3, 1, 2])
    before = (list(d._seq), copy.deepcopy(dict(d._index)))
    d.begin_step([1, 2, 3, 1, 2, 4, 1, 2, 4])  # a guess drafted ahead
    assert d.longest_match([1, 2])[0] != before[1].get((1, 2))
    d.begin_step([1, 2, 3, 1, 2])  # the guess was wrong: back to what was committed
    assert (d._seq, dict(d._index)) == before
    fresh = NgramDrafter(VOCAB, max_ngram=3)
    fresh.start([1, 2, 3, 7, 7])
    d.begin_step([1, 2, 3, 7, 7])  # diverges inside the old sequence
    assert (d._seq, dict(d._index)) == (fresh._seq, dict(fresh._index))


def test_ngram_datastore_is_used_after_the_sequence_itself():
    d = NgramDrafter(VOCAB, max_ngram=2, datastore=build_datastore([[5, 6, 7, 8], [5, 6, 9]]).index)
    d.start([1, 2, 1, 3])
    assert d.longest_match([0, 5, 6])[0] == {7: 1, 9: 1}  # only the datastore has (5, 6)
    assert d.longest_match([0, 1])[0] == {2: 1, 3: 1}  # the sequence's own match wins
    row = d.begin_step([1, 2, 1, 3, 5, 6]).logprobs[0]
    assert torch.isfinite(row).nonzero().flatten().tolist() == [7, 9]


def test_a_match_with_many_continuations_proposes_the_most_frequent():
    """A short n-gram of a large corpus can be followed by thousands of tokens: the proposal keeps the
    ``MAX_CONTINUATIONS`` most frequent, each at its frequency among all."""
    vocab = 4 * MAX_CONTINUATIONS
    seqs = [[1, 2 + k] for k in range(2 * MAX_CONTINUATIONS)] + [[1, 2]] * 3  # 2 follows 1 four times
    d = NgramDrafter(vocab, datastore=build_datastore(seqs).index)
    d.start([0])
    tree = DraftTree.with_root(0)
    row = d.propose(tree, [tree.add(0, 1, -1.0)]).logprobs[0]  # the context ends in 1
    kept = torch.isfinite(row).nonzero().flatten().tolist()
    assert len(kept) == MAX_CONTINUATIONS and 2 in kept
    assert row[2].item() == pytest.approx(math.log(4 / (2 * MAX_CONTINUATIONS + 3)))


def test_ngram_proposes_what_followed_the_longest_span_and_reports_its_length():
    # (3, 4, 5) was followed by 6 and by 7, but only the longer span (1, 2, 3, 4, 5) by 6: the longer
    # match proposes just its own continuation, and says how long it was.
    seq = [1, 2, 3, 4, 5, 6, 9, 3, 4, 5, 7, 1, 2, 3, 4, 5]
    trigram = NgramDrafter(VOCAB, max_ngram=3)
    trigram.start(seq)
    short = trigram.begin_step(seq)
    assert torch.isfinite(short.logprobs[0]).nonzero().flatten().tolist() == [6, 7] and short.match == [3]
    longest = NgramDrafter(VOCAB, max_ngram=8)
    longest.start(seq)
    long = longest.begin_step(seq)
    assert torch.isfinite(long.logprobs[0]).nonzero().flatten().tolist() == [6] and long.match == [5]
    assert long.logprobs[0, 6].item() == 0.0


# ---- hybrid drafter --------------------------------------------------------------------------------------
def _verdict(tree: DraftTree, path: list[int]) -> Verdict:
    """A verdict accepting ``path`` (only what ``observe`` reads is filled in)."""
    return Verdict(
        ["root"] + ["accepted" if n in path else "rejected" for n in range(1, len(tree))],
        path,
        0,
        [0] * len(tree),
        [1.0] * len(tree),
    )


def _hybrid(model_token: int, sequence: list[int]) -> HybridDrafter:
    model = TableDrafter(VOCAB, lambda ctx: _one_hot(model_token))
    h = HybridDrafter(model, NgramDrafter(VOCAB, max_ngram=2))
    h.start(sequence)
    return h


def test_hybrid_mixes_the_sources_and_labels_each_node():
    h = _hybrid(model_token=7, sequence=[1, 2, 3, 1, 2])  # lookup after (1, 2) proposes 3
    proposal = h.begin_step([1, 2, 3, 1, 2])
    row = proposal.logprobs[0].exp()
    w = h.retrieval_weight
    assert w == pytest.approx(0.5)
    assert row[3].item() == pytest.approx(w * 1.0 + (1 - w) * 0.1 / (VOCAB - 1), rel=1e-5)
    assert row[7].item() == pytest.approx((1 - w) * 0.9, rel=1e-5)
    assert row.sum().item() == pytest.approx(1.0, rel=1e-5)
    assert proposal.from_retrieval[0, [3, 7]].tolist() == [True, False]


def test_hybrid_without_a_lookup_match_is_the_model():
    h = _hybrid(model_token=7, sequence=[1, 2, 3, 9])  # nothing ever followed 9: no lookup match
    assert torch.allclose(h.begin_step([1, 2, 3, 9]).logprobs[0], _one_hot(7))


def test_hybrid_budget_applies_to_the_merged_tree_and_sources_are_recorded():
    h = _hybrid(model_token=7, sequence=[1, 2, 3, 1, 2])
    tree = TalonBuilder(budget=6, topk=3, mu=0.03).build(h, [1, 2, 3, 1, 2]).tree
    assert tree.num_drafts <= 6
    assert set(tree.source[1:]) == {SOURCE_MODEL, SOURCE_RETRIEVAL}
    assert {tree.token[c]: tree.source[c] for c in tree.children(0)}[3] == SOURCE_RETRIEVAL


def test_hybrid_weight_follows_running_acceptance():
    h = _hybrid(model_token=7, sequence=[1, 2, 3, 1, 2])
    for _ in range(5):  # retrieval's node accepted, model's refused
        tree = DraftTree.with_root(2)
        r = tree.add(0, 3, 0.0, SOURCE_RETRIEVAL)
        tree.add(0, 7, -1.0, SOURCE_MODEL)
        h.observe(tree, _verdict(tree, [0, r]))
    assert h.retrieval_weight > 0.8
    info = h.step_info()
    assert info["retrieval_acceptance"] > info["model_acceptance"]
    for _ in range(20):  # then the other way round
        tree = DraftTree.with_root(2)
        tree.add(0, 3, 0.0, SOURCE_RETRIEVAL)
        m = tree.add(0, 7, -1.0, SOURCE_MODEL)
        h.observe(tree, _verdict(tree, [0, m]))
    assert h.retrieval_weight < 0.2
    assert h.min_weight <= h.retrieval_weight <= 1 - h.min_weight


def test_hybrid_hands_the_committed_sequence_to_both_sources():
    h = _hybrid(model_token=7, sequence=[1, 2, 3])
    h.begin_step([1, 2, 3, 4, 5])
    h.begin_step([1, 2, 3])
    assert h.retrieval._seq == [1, 2, 3] and h.model._seq == [1, 2, 3]


def test_where_both_sources_are_sure_the_mixture_stays_a_probability_and_eagle2_keeps_parents():
    """A model and prompt lookup both giving a token probability 1: log(w) + log(1 - w) mixed in float32
    rounded a hair above 0 for about a fifth of the weights, paths then scored higher deeper down, and
    EAGLE-2's re-rank kept a node without its parent (ValueError mid-run)."""
    sure = torch.full((VOCAB,), -math.inf)
    sure[3] = 0.0
    sequence = [3] * 8  # lookup after (3, 3) proposes 3, as the model does
    for k in range(50, 951, 7):
        h = HybridDrafter(TableDrafter(VOCAB, lambda ctx: sure), NgramDrafter(VOCAB), fixed_weight=k / 1000)
        h.start(sequence)
        assert h.begin_step(sequence).logprobs.max().item() <= 0.0, k
        tree = Eagle2Builder(budget=3, topk=2, depth=5).build(h, sequence).tree
        assert all(tree.parent[n] < n for n in range(1, len(tree)))


def test_a_held_weight_ignores_the_running_acceptance():
    h = HybridDrafter(TableDrafter(VOCAB, lambda ctx: _one_hot(7)), NgramDrafter(VOCAB), fixed_weight=0.3)
    h.start([1, 2, 3, 1, 2])
    tree = DraftTree.with_root(2)
    tree.add(0, 7, -1.0, SOURCE_MODEL)
    h.observe(tree, _verdict(tree, [0, 1]))
    assert h.retrieval_weight == 0.3 and h.step_info()["retrieval_weight"] == 0.3


# ---- async guesses --------------------------------------------------------------------------------------
def test_likely_outcome_is_the_drafters_most_likely_path_and_bonus():
    tree = DraftTree.with_root(0)
    a = tree.add(0, 1, math.log(0.9))
    b = tree.add(a, 2, math.log(0.95))
    tree.add(b, 3, math.log(0.2))  # b: .855 * min(.2, .8) = .171 beats the leaf: .171 * mean(.9, .95, .2)
    assert likely_outcome(tree) == [0, a, b]
    unsure = DraftTree.with_root(0)
    unsure.add(0, 1, math.log(0.2))
    unsure.add(0, 2, math.log(0.1))  # root: min(.1, .7) = .1 beats the leaves: .2 * .2 and .1 * .2
    assert likely_outcome(unsure) == [0]


def test_likely_outcome_prefers_a_confident_leaf_to_a_wide_root():
    """Ten root children holding 0.7: stopping at the root is likelier than reaching any one leaf, but
    its bonus would have to be a token ranked below all ten, so the guess goes down the best chain."""
    tree = DraftTree.with_root(0)
    a = tree.add(0, 1, math.log(0.4))
    for t in range(2, 11):
        tree.add(0, t, math.log(0.3 / 9))
    b = tree.add(a, 20, math.log(0.7))  # P(stop at b) = .28 < P(stop at root) = .3, but
    assert likely_outcome(tree) == [0, a, b]  # b: .28 * mean(.4, .7) = .154 > a: .4 * .3 > root: .3 / 9


def test_guessed_bonus_skips_tokens_the_tree_already_holds():
    row = torch.log_softmax(torch.tensor([0.0, 3.0, 2.0, 1.0]), dim=0)
    assert best_outside(row, [1]) == 2
    assert best_outside(torch.full((4,), -math.inf), []) is None
    assert best_outside(None, []) is None


# ---- timings: projection, timeline, verdict -------------------------------------------------------------
def _step(index: int, draft: float, verify: float, start: float, hit=None, spec=None, wait=0.0) -> StepRecord:
    tree = DraftTree.with_root(1)
    tree.add(0, 2, -0.1)
    return StepRecord(
        index=index,
        tree=tree,
        status=["root", "accepted"],
        accepted_path=[0, 1],
        bonus_token=3,
        target_token=[2, 3],
        target_prob=[1.0, 0.9],
        committed_ids=[2, 3],
        committed_text="ab",
        node_text=["x", "y"],
        target_text=["y", "z"],
        draft_start=start,
        draft_seconds=draft,
        verify_start=start + draft,
        verify_seconds=verify,
        drafter_forwards=1,
        speculate_start=None if spec is None else start + draft,
        speculate_seconds=spec or 0.0,
        speculate_hit=hit,
        wait_seconds=wait,
    )


def _trace(steps, execution="sync") -> RunTrace:
    return RunTrace(
        prompt="p",
        prompt_ids=[1],
        tree_config={"method": "talon"},
        decode_config={},
        target="t",
        drafter="d",
        device="cpu",
        prefill_seconds=0.5,
        steps=steps,
        execution=execution,
    )


def test_projection_hides_drafts_behind_verification():
    sync = _trace([_step(k, draft=0.2, verify=0.5, start=k) for k in range(4)])
    assert sync.seconds == pytest.approx(0.5 + 4 * 0.7)
    assert metrics.projected_async_seconds(sync, 0.0) == pytest.approx(sync.seconds)
    assert metrics.projected_async_seconds(sync, 1.0) == pytest.approx(0.5 + 0.2 + 4 * 0.5)
    slow_draft = _trace([_step(k, draft=0.8, verify=0.5, start=k) for k in range(3)])
    assert metrics.projected_async_seconds(slow_draft, 1.0) == pytest.approx(0.5 + 0.8 + 3 * 0.5 + 2 * 0.3)
    # Each step's bookkeeping is not overlapped: with no right guess the projection is the run's own time
    # (it read as "0 % of the guesses were right, so overlap could have hidden at most 1 %").
    steps = [replace(_step(k, draft=0.2, verify=0.5, start=k), bookkeeping_seconds=0.05) for k in range(4)]
    kept = _trace(steps)
    assert kept.seconds == pytest.approx(0.5 + 4 * 0.75)
    assert metrics.projected_async_seconds(kept, 0.0) == pytest.approx(kept.seconds)
    assert metrics.projected_async_seconds(kept, 1.0) == pytest.approx(0.5 + 0.2 + 4 * 0.55)


def test_async_trace_counts_waiting_and_hit_rate_round_trips():
    steps = [_step(0, 0.2, 0.5, 0.0, hit=True, spec=0.6, wait=0.1), _step(1, 0.0, 0.5, 0.8, hit=False, spec=0.3)]
    trace = _trace(steps, "async")
    assert trace.seconds == pytest.approx(0.5 + 0.2 + 0.5 + 0.1 + 0.0 + 0.5)
    assert metrics.speculation_hit_rate(trace) == 0.5
    assert metrics.speculation_hit_rate(_trace([_step(0, 0.2, 0.5, 0.0)])) is None
    # the last step guesses nothing (no step follows it): the share is over the steps that guessed
    ended = _trace([*steps, _step(2, 0.0, 0.5, 1.6, hit=None)], "async")
    assert metrics.speculation_hit_rate(ended) == 0.5
    assert RunTrace.from_json(trace.to_json()) == trace


def test_old_traces_without_the_new_fields_still_load():
    d = _trace([_step(0, 0.2, 0.5, 0.0)]).to_dict()
    d.pop("execution")
    for s in d["steps"]:
        for key in ("drafter_info", "speculate_start", "speculate_seconds", "speculate_hit", "wait_seconds"):
            s.pop(key)
    trace = RunTrace.from_dict(d)
    assert trace.execution == "sync" and trace.steps[0].speculate_hit is None


def test_timeline_has_a_drafter_and_a_target_lane_per_run_and_marks_discarded_drafts():
    sync = _trace([_step(k, 0.2, 0.5, k * 0.7) for k in range(3)])
    asyn = _trace(
        [
            _step(0, 0.2, 0.5, 0.0, hit=True, spec=0.4),
            _step(1, 0.0, 0.5, 0.7, hit=False, spec=0.6, wait=0.1),
            _step(2, 0.2, 0.5, 1.3),
        ],
        "async",
    )
    fig = charts.timeline_chart({"sync": sync, "async": asyn})
    lanes = {y for t in fig.data for y in t.y}
    assert lanes == {"sync · drafter", "sync · target", "async · drafter", "async · target"}
    by_name = {t.name: t for t in fig.data if t.name}
    names = {t.name for t in fig.data}
    assert {
        "draft",
        "verify",
        "speculative draft, kept",
        "speculative draft, discarded",
        "target waits for drafter",
    } <= names
    drafted_async = [b for t in fig.data if t.name == "draft" for b, y in zip(t.base, t.y) if y == "async · drafter"]
    assert drafted_async == [0.0, 1.3]  # step 1's tree came from the kept speculation
    assert by_name["verify"].orientation == "h"
    # kept green beside a plain draft's orange looks alike to a red-blind reader: hatched, on its colour
    patterns = {name: by_name[name].marker.pattern for name in ("draft", "speculative draft, kept")}
    assert not patterns["draft"].shape and patterns["speculative draft, kept"].shape == "/"
    assert by_name["speculative draft, discarded"].marker.pattern.shape == "."
    assert {by_name[n].marker.pattern.fillmode for n in names if by_name[n].marker.pattern.shape} == {"overlay"}
    assert charts.timeline_chart({}).layout.annotations  # empty -> a note, no error


def test_timeline_leaves_out_the_threads_hand_over():
    """A wait of ~10 µs a step (the hand-over between the target's and the drafter's threads) drew a
    hairline and a legend entry beside a table saying the target waited 0.000 s: waits under
    ``WAIT_SHOWN_SECONDS`` are not drawn, longer ones are."""
    steps = [_step(k, 0.2, 0.5, k * 0.7, hit=True, spec=0.1, wait=w) for k, w in enumerate((1e-5, 2e-5, 0.05))]
    fig = charts.timeline_chart({"async": _trace(steps, "async")})
    waits = [t for t in fig.data if t.name == "target waits for drafter"]
    assert len(waits) == 1 and list(waits[0].x) == [0.05]
    # the prefill is on the clock too: drawn on the target's lane before step 1 (the lanes began 0.5 s in)
    prefill = [t for t in fig.data if t.name.startswith("prefill")]
    assert len(prefill) == 1 and list(prefill[0].base) == [0.0] and list(prefill[0].x) == [0.5]
    assert list(prefill[0].y) == ["async · target"] and prefill[0].customdata[0][0] == "before step 1"


def test_async_table_and_verdict_are_plain():
    sync = _trace([_step(k, 0.2, 0.5, k) for k in range(3)])
    asyn = _trace([_step(k, 0.2, 0.5, k, hit=k == 0, spec=0.2) for k in range(3)], "async")
    table = summary.async_table({"sync": sync, "async": asyn})
    assert list(table["run"]) == ["sync", "async", "async, projected"]
    for column in ("drafted ahead s, while verifying (median)", "target waited for the guessed tree s (median)"):
        assert table[column].isna().tolist() == [True, False, True], column  # a sync run guesses nothing
    assert table["drafted ahead s, while verifying (median)"][1] == pytest.approx(0.6)  # three guesses of 0.2 s
    # over repetitions every phase is a median, as the wall time is (the first run alone added past it)
    slow = _trace([_step(k, 0.6, 0.5, k) for k in range(3)])
    table = summary.async_table({"sync": slow, "async": asyn}, {"sync": [slow, sync, sync], "async": [asyn]})
    assert table["draft s, target idle (median)"][0] == pytest.approx(0.6)  # three steps of 0.2 s, not 1.8
    text = summary.async_verdict({"sync": sync, "async": asyn})
    assert "identical" in text and "share the same CPU cores" in text


def test_step_note_names_hybrid_weights_and_guess_outcome():
    step = _step(0, 0.2, 0.5, 0.0, hit=False, spec=0.1)
    step.drafter_info = {"retrieval_weight": 0.3, "retrieval_acceptance": 0.4, "model_acceptance": 0.6}
    note = summary.step_note(step)
    assert "retrieval weight 0.30" in note and "guess wrong, discarded" in note
