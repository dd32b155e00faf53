"""Fast tier: the engine on a tiny random Llama (``tests/tiny.py``, built in memory): the tree KV cache,
the tree attention mask (through the logits it produces), the verifier, and the sync and async decoding
loops with every method and drafter, against transformers' own ``generate``."""

from __future__ import annotations

import copy
import dataclasses
import math
import time

import numpy as np
import pytest
import torch

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.calibration import Calibration
from talon.drafters.factory import drafter_for, hybrid_with_lookup, make_drafter
from talon.drafters.head import HeadDrafter
from talon.drafters.model import ModelDrafter
from talon.engine.builders import TalonBuilder
from talon.engine.decode import fill_texts, run_to_end
from talon.engine.verify import LEAF_HEAD_PROB, LEAVES_WITH_INTERNAL, Verifier, greedy_accept, logit_nodes
from talon.models.cpu_linear import PackedLinear, pack_linears
from talon.models.registry import ModelRegistry
from talon.runtime.cost_curve import CostCurve
from talon.runtime.kv_cache import CachedLM, KVBuffer, check_full_attention
from talon.runtime.masks import tree_rows_mask
from talon.tree import DraftTree, Verdict
from tests.tiny import VOCAB, greedy_generate, greedy_references, prompt_ids, random_head, tiny_config, tiny_target

NEW_TOKENS = 24
PROMPT_SEEDS = (1, 2, 3)
METHODS = {
    "chain": TreeConfig(method="chain", gamma=4),
    "static": TreeConfig(method="static", budget=10, depth=4),
    "eagle2": TreeConfig(method="eagle2", budget=10, topk=3, depth=4),
    "talon": TreeConfig(method="talon", budget=10, topk=3, mu=0.05),
    "talon-gated-root": TreeConfig(method="talon", budget=10, topk=0, mu=0.05),
    "hybrid": TreeConfig(method="talon", budget=10, topk=3, mu=0.05),
    "talon-auto": TreeConfig(method="talon", budget=24, topk=3, mu=0.05, auto=True),
    "eagle2-auto": TreeConfig(method="eagle2", budget=24, topk=3, depth=5, auto=True),
    "hybrid-auto": TreeConfig(method="talon", budget=24, topk=3, mu=0.05, auto=True),
}
CURVE = CostCurve(plain=0.01, verify=((1, 0.008), (8, 0.011), (32, 0.02), (128, 0.06)), call=((1, 0.001), (64, 0.004)))
"""A synthetic cost curve for the auto-sized methods (their trees then vary from step to step)."""


def curve_of(cfg: TreeConfig) -> CostCurve | None:
    return CURVE if cfg.auto else None


def assert_head_method_equals_plain(
    target, head, method: str, seeds=(1, 2), new_tokens: int = NEW_TOKENS, execution: str = "sync"
) -> None:
    """``method`` (a key of ``METHODS``) with ``head`` drafting (``drafter_of``) emits, greedily, what
    plain decoding of ``target`` (``tiny_target()``) does, which is stock ``generate()``'s."""
    for seed in seeds:
        plain = run_to_end(
            target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=new_tokens), prompt_ids=prompt_ids(seed)
        ).output_ids
        assert plain == greedy_generate(tiny_target(), prompt_ids(seed), new_tokens)
        trace = run_to_end(
            target,
            drafter_of("head", method.removesuffix("-auto"), target, None, head),
            METHODS[method],
            DecodeConfig(max_new_tokens=new_tokens, execution=execution),
            prompt_ids=prompt_ids(seed),
            cost_curve=curve_of(METHODS[method]),
        )
        assert trace.output_ids == plain, f"{method}/{execution} diverged on prompt {seed}"


@pytest.fixture(scope="module")
def target():
    return tiny_target()


@pytest.fixture(scope="module")
def registry():
    return ModelRegistry()


@pytest.fixture(scope="module")
def head(target):
    return random_head(target)


@pytest.fixture(scope="module")
def reference(target):
    """transformers' greedy output per prompt seed."""
    return greedy_references(target, PROMPT_SEEDS, NEW_TOKENS)


def drafter_of(kind: str, method: str, target, registry, head):
    """A fresh drafter for ``method``: ``self`` (the target drafting for itself: every greedy draft is
    accepted), ``layers:1``, ``ngram``, or ``head`` (a random draft head); merged with prompt lookup for
    ``hybrid``."""
    if kind in ("self", "head"):
        drafter = ModelDrafter(target) if kind == "self" else HeadDrafter(head, target)
        return hybrid_with_lookup(drafter, target.vocab_size) if method == "hybrid" else drafter
    return drafter_for(method, kind, target, registry)


def random_tree(seed: int, root: int, size: int = 12) -> DraftTree:
    g = torch.Generator().manual_seed(seed)
    tree = DraftTree.with_root(root)
    for _ in range(size):
        parent = int(torch.randint(0, len(tree), (), generator=g))
        tree.add(parent, int(torch.randint(2, VOCAB, (), generator=g)), -1.0)
    return tree


def path_logits(target, prefix: list[int], tree: DraftTree) -> torch.Tensor:
    """Row i: the target's next-token logits after the committed ``prefix`` and the root-to-node-i path,
    each path run alone with a plain forward (no cache, no tree mask)."""
    rows = []
    for node in range(len(tree)):
        ids = prefix + [tree.token[n] for n in tree.path_to(node)]
        rows.append(target.model(torch.tensor([ids])).logits[0, -1])
    return torch.stack(rows)


# ---- the KV cache and the tree mask ------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(4))
def test_tree_forward_equals_each_path_run_alone(target, seed):
    ids = prompt_ids(seed)
    cached = CachedLM(target)
    with torch.inference_mode():
        cached.extend_committed(ids[:-1])
        tree = random_tree(seed, ids[-1])
        logits = cached.forward_nodes(tree, range(len(tree)), cached.committed_len).logits
        expected = path_logits(target, ids[:-1], tree)
    assert torch.allclose(logits, expected, atol=1e-4)


def test_tree_fed_layer_by_layer_equals_tree_fed_at_once(target):
    ids = prompt_ids(5)
    tree = random_tree(5, ids[-1], size=15)
    with torch.inference_mode():
        whole = CachedLM(target)
        whole.extend_committed(ids[:-1])
        at_once = whole.forward_nodes(tree, range(len(tree)), whole.committed_len).logits
        layered = CachedLM(target)
        layered.extend_committed(ids[:-1])
        rows = {}
        for d in range(tree.max_depth + 1):
            layer = [i for i in range(len(tree)) if tree.depth[i] == d]
            for node, row in zip(layer, layered.forward_nodes(tree, layer, layered.committed_len).logits):
                rows[node] = row
    assert torch.allclose(at_once, torch.stack([rows[i] for i in range(len(tree))]), atol=1e-4)


def test_committing_a_path_keeps_exactly_the_prefix_and_path(target):
    ids = prompt_ids(7)
    tree = random_tree(7, ids[-1], size=14)
    deepest = max(range(len(tree)), key=lambda n: tree.depth[n])
    path = tree.path_to(deepest)
    with torch.inference_mode():
        cached = CachedLM(target)
        cached.extend_committed(ids[:-1])
        cached.forward_nodes(tree, range(len(tree)), cached.committed_len)
        cached.commit_nodes(path)
        assert cached.committed_len == cached.length == len(ids) - 1 + len(path)
        nxt = cached.extend_committed([5, 6], logit_rows="all").logits
        full = ids + [tree.token[n] for n in path[1:]] + [5, 6]
        expected = target.model(torch.tensor([full])).logits[0, -2:]
    assert torch.allclose(nxt, expected, atol=1e-4)


def test_crop_forgets_committed_rows(target):
    ids = prompt_ids(8)
    with torch.inference_mode():
        cached = CachedLM(target)
        cached.extend_committed(ids)
        cached.crop_committed(5)
        assert cached.committed_len == cached.length == 5
        again = cached.extend_committed(ids[5:], logit_rows="all").logits
        expected = target.model(torch.tensor([ids])).logits[0, 5:]
    assert torch.allclose(again, expected, atol=1e-4)


@pytest.mark.parametrize("size", [1, 4, 20])  # every row in one LM head call, or the internal ones
def test_verifier_greedy_verdict_matches_path_by_path_logits(target, size):
    ids = prompt_ids(9)
    tree = random_tree(9, ids[-1], size=size)
    with torch.inference_mode():
        verifier = Verifier(target)
        verifier.prefill(ids)
        verdict = verifier.verify(tree, 0.0)
        expected = greedy_accept(tree, path_logits(target, ids[:-1], tree))
    assert (verdict.status, verdict.accepted_path, verdict.bonus_token, verdict.target_token) == (
        expected.status,
        expected.accepted_path,
        expected.bonus_token,
        expected.target_token,
    )
    assert verdict.target_prob == pytest.approx(expected.target_prob, rel=1e-4, abs=1e-6)


# ---- the loops against generate() -----------------------------------------------------------------------
def matrix_cases() -> list:
    """Every method x drafter x execution: on the first prompt in the fast tier (asynchronous only with the
    app's and the CLI's drafters there; a model drafter's detours through a guess are also checked on
    their own, ``test_drafter_interface``), everything else with the slow tier."""
    cases = []
    for method in METHODS:
        for kind in ("self", "layers:1", "ngram", "head"):
            if method.startswith("hybrid") and kind == "ngram":
                continue  # hybrid merges a model drafter with prompt lookup; n-gram alone is refused (tested elsewhere)
            for execution in ("sync", "async"):
                for seeds, name in ((PROMPT_SEEDS[:1], "prompt1"), (PROMPT_SEEDS[1:], "prompts2-3")):
                    fast = name == "prompt1" and (execution == "sync" or kind in ("ngram", "head"))
                    cases.append(
                        pytest.param(
                            method,
                            kind,
                            execution,
                            seeds,
                            id=f"{method}-{kind}-{execution}-{name}",
                            marks=() if fast else pytest.mark.slow,
                        )
                    )
    return cases


@pytest.mark.parametrize(("method", "drafter_kind", "execution", "seeds"), matrix_cases())
def test_greedy_output_equals_generate(target, registry, head, reference, method, drafter_kind, execution, seeds):
    accepted = 0
    for seed in seeds:
        drafter = drafter_of(drafter_kind, method.removesuffix("-auto"), target, registry, head)
        trace = run_to_end(
            target,
            drafter,
            METHODS[method],
            DecodeConfig(max_new_tokens=NEW_TOKENS, execution=execution),
            prompt_ids=prompt_ids(seed),
            cost_curve=curve_of(METHODS[method]),
        )
        assert trace.output_ids == reference[seed], f"{method}/{drafter_kind}/{execution} diverged on prompt {seed}"
        assert trace.execution == execution
        accepted += sum(s.accepted_tokens for s in trace.steps)
    if drafter_kind == "self":
        assert accepted > 0, "the target drafting for itself must get drafts accepted"


def test_autoregressive_equals_generate(target, reference):
    for seed in PROMPT_SEEDS:
        trace = run_to_end(
            target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=NEW_TOKENS), prompt_ids=prompt_ids(seed)
        )
        assert trace.output_ids == reference[seed]
        assert all(len(s.tree) == 1 for s in trace.steps)


def test_self_drafting_accepts_whole_chains(target, reference):
    """The target as its own drafter: every chain draft is the target's greedy token, so each step
    commits gamma drafts + the bonus (until the end)."""
    trace = run_to_end(
        target,
        ModelDrafter(target),
        METHODS["chain"],
        DecodeConfig(max_new_tokens=NEW_TOKENS),
        prompt_ids=prompt_ids(1),
    )
    assert trace.output_ids == reference[1]
    assert all(s.accepted_tokens == 4 for s in trace.steps[:-1])


def test_eos_ends_the_run_like_generate(target):
    """With an end-of-sequence token that greedy decoding reaches (the 10th token of a prompt's
    continuation, declared EOS on a copy of the target), every method stops there, EOS included."""
    plain = greedy_generate(target, prompt_ids(1), NEW_TOKENS)
    eos = plain[9]
    model = copy.copy(target.model)
    model.generation_config = copy.deepcopy(target.model.generation_config)
    model.generation_config.eos_token_id = eos
    stopping = dataclasses.replace(target, model=model)
    expected = plain[: plain.index(eos) + 1]
    assert eos in stopping.eos_token_ids and len(expected) <= 10
    for method in ("ar", "talon", "chain"):
        drafter = None if method == "ar" else ModelDrafter(stopping)
        trace = run_to_end(
            stopping,
            drafter,
            TreeConfig(method=method, budget=8, topk=2, gamma=3),
            DecodeConfig(max_new_tokens=NEW_TOKENS),
            prompt_ids=prompt_ids(1),
        )
        assert trace.output_ids == expected and trace.stop_reason == "eos"


@pytest.mark.parametrize("execution", ["sync", "async"])
@pytest.mark.parametrize("method", ["chain", "static", "eagle2", "talon", "talon-auto", "eagle2-auto"])
def test_no_draft_goes_past_max_new_tokens(target, reference, method, execution):
    """The target drafting for itself (its greedy drafts are accepted) with 7 new tokens: no step's tree
    is deeper than the tokens the run has left less the bonus, a step with one token left is plain (and,
    synchronously, asks the drafter nothing), and the output is ``generate``'s first 7 tokens."""
    cfg = METHODS[method]
    trace = run_to_end(
        target,
        ModelDrafter(target),
        cfg,
        DecodeConfig(max_new_tokens=7, execution=execution),
        prompt_ids=prompt_ids(1),
        cost_curve=curve_of(cfg),
    )
    assert trace.output_ids == reference[1][:7] and trace.stop_reason == "max_new_tokens"
    left = 7
    for step in trace.steps:
        assert step.tree.max_depth <= left - 1, (step.index, left)
        if step.tree.max_depth == left - 1 and step.stop == "end":
            assert step.accepted_tokens + 1 == left  # a self-drafted tree is accepted to its deepest node
        if left == 1:
            assert len(step.tree) == 1 and step.stop == "end"
            assert execution == "async" or step.drafter_forwards == 0
        left -= len(step.committed_ids)
    assert left == 0
    if method in ("chain", "static"):  # 5 tokens a step: the second tree meets the limit
        assert [s.stop for s in trace.steps] == ["depth", "end"]


def test_a_run_past_the_context_says_which_setting_to_lower(target, registry):
    """Refused before it starts: a tree that alone takes the run past the context names its budget N (or γ),
    not the prompt and the new tokens (``--budget 10000`` read "Shorten the prompt or lower max new tokens")."""
    from talon.engine.decode import new_trace

    ids, context = prompt_ids(4), target.context_length
    drafter = drafter_for("talon", "layers:1", target, registry)
    for cfg, setting in (
        (TreeConfig(method="talon", budget=context), "budget N"),
        (TreeConfig(method="chain", gamma=context), "γ"),
    ):
        with pytest.raises(ConfigError, match=f"Lower {setting}"):
            new_trace(target, drafter, cfg, DecodeConfig(max_new_tokens=8), "", ids)
    with pytest.raises(ConfigError, match="Shorten the prompt or lower max new tokens"):
        new_trace(target, drafter, TreeConfig(method="talon", budget=8), DecodeConfig(max_new_tokens=context), "", ids)
    new_trace(target, drafter, TreeConfig(method="talon", budget=8), DecodeConfig(max_new_tokens=8), "", ids)


def test_sampling_async_equals_sync_for_a_model_drafter(target, registry):
    """At T > 0 with a model drafter the tree is a deterministic function of the context, so the
    sampler's random numbers are used the same way: async gives the synchronous sample."""
    outs = []
    for execution in ("sync", "async"):
        trace = run_to_end(
            target,
            make_drafter("layers:1", target, registry),
            METHODS["talon"],
            DecodeConfig(temperature=1.0, seed=3, max_new_tokens=NEW_TOKENS, execution=execution),
            prompt_ids=prompt_ids(2),
        )
        outs.append(trace.output_ids)
    assert outs[0] == outs[1]


def test_builder_on_the_tiny_head_grows_a_budgeted_tree(target, head):
    drafter = HeadDrafter(head, target)
    ids = prompt_ids(4)
    verifier = Verifier(target, drafter.feature_layers)
    with torch.inference_mode():
        verifier.prefill(ids)
        drafter.start(ids, verifier.features)
        result = TalonBuilder(budget=12, topk=3, mu=0.1).build(drafter, ids, verifier.features)
    assert result.tree.num_drafts == 12 and result.drafter_forwards == result.tree.max_depth


# ---- the production tree mask -------------------------------------------------------------------------
def walked_mask(tree: DraftTree, rows: list[int], fed_before: list[int]) -> torch.Tensor:
    """Reference by a parent walk: which of ``fed_before + rows`` (tree rows in feed order) each node of
    ``rows`` may see (its ancestors and itself among the fed ones)."""
    order = fed_before + rows
    out = torch.zeros(len(rows), len(order), dtype=torch.bool)
    for k, node in enumerate(rows):
        a = node
        while a != -1:
            if a in order:
                out[k, order.index(a)] = True
            a = tree.parent[a]
    return out


@pytest.mark.parametrize("seed", range(6))
def test_tree_rows_mask_equals_the_ancestor_walk(seed):
    """The mask the forward uses (``tree_rows_mask``, vectorised) against a Python walk, for a whole
    tree fed at once (the target), layer by layer without the root (a drafter), and in two halves
    whose second holds both rows with old parents and rows with new ones."""
    tree = random_tree(seed, 5, size=30)
    whole = list(range(len(tree)))
    none = [-1] * len(tree)
    got = tree_rows_mask(np.zeros((0, 0), dtype=bool), tree.parent, none, [d + 1 for d in tree.depth])
    assert torch.equal(torch.from_numpy(got), walked_mask(tree, whole, []))
    fed: list[int] = []
    closure = np.zeros((0, 0), dtype=bool)
    for d in range(1, tree.max_depth + 1):
        layer = [n for n in whole if tree.depth[n] == d]
        old = [fed.index(tree.parent[n]) if tree.parent[n] in fed else -1 for n in layer]
        rows = tree_rows_mask(closure, [-1] * len(layer), old, [1] * len(layer))
        assert torch.equal(torch.from_numpy(rows), walked_mask(tree, layer, fed))
        closure = np.concatenate([np.concatenate([closure, np.zeros((len(fed), len(layer)), dtype=bool)], 1), rows])
        fed += layer
    first, second = whole[:12], whole[12:]
    closure = tree_rows_mask(
        np.zeros((0, 0), dtype=bool), tree.parent[:12], [-1] * 12, [d + 1 for d in tree.depth[:12]]
    )
    local = {n: k for k, n in enumerate(second)}
    parent_local = [local.get(tree.parent[n], -1) for n in second]
    parent_old = [tree.parent[n] if tree.parent[n] in first else -1 for n in second]
    generation: list[int] = []
    for k in parent_local:
        generation.append(generation[k] + 1 if k >= 0 else 1)
    rows = tree_rows_mask(closure, parent_local, parent_old, generation)
    assert torch.equal(torch.from_numpy(rows), walked_mask(tree, second, first))


def test_the_cache_is_written_in_place_and_commit_moves_only_the_path(target):
    ids = prompt_ids(11)
    tree = random_tree(11, ids[-1], size=16)
    deepest = max(range(len(tree)), key=lambda n: (tree.depth[n], n))
    path = tree.path_to(deepest)
    with torch.inference_mode():
        cached = CachedLM(target)
        cached.extend_committed(ids[:-1], logit_rows=None)
        buffer = cached.kv.buffer
        committed = buffer[:, :, :, : cached.committed_len].clone()
        cached.forward_nodes(tree, range(len(tree)), cached.committed_len, logit_rows=None)
        assert cached.kv.buffer is buffer, "a forward must write into the preallocated buffer"
        moved = buffer[:, :, :, [cached.committed_len + n for n in path]].clone()
        start = cached.committed_len
        cached.commit_nodes(path)
    assert torch.equal(buffer[:, :, :, :start], committed)
    assert torch.equal(buffer[:, :, :, start : start + len(path)], moved)
    assert cached.committed_len == cached.length == start + len(path)


@pytest.mark.parametrize("size", [3, 5, 20])
def test_the_lm_head_runs_once_on_the_internal_nodes_and_likely_leaves_and_again_only_for_another_final_leaf(
    target, size
):
    ids = prompt_ids(12)
    tree = random_tree(12, ids[-1], size=size)
    rows = []
    head = target.model.get_output_embeddings()
    handle = head.register_forward_hook(lambda m, args, out: rows.append(args[0].shape[0]))
    try:
        with torch.inference_mode():
            verifier = Verifier(target)
            verifier.prefill(ids)
            checked = verifier.verify(tree, 0.0)
    finally:
        handle.remove()
    headed = logit_nodes(tree)
    internal = [i for i, kids in enumerate(tree.children_lists()) if kids]
    assert set(internal) <= set(headed)
    if len(tree) - len(internal) <= LEAVES_WITH_INTERNAL:
        assert headed == list(range(len(tree)))
    end = checked.accepted_path[-1]
    assert rows == [len(headed)] + ([1] if end not in headed else [])
    verifier.drop_tree()
    with torch.inference_mode():
        full = greedy_accept(tree, verifier.node_logits(tree))
    assert (checked.accepted_path, checked.bonus_token) == (full.accepted_path, full.bonus_token)


def test_a_wide_tree_heads_its_internal_nodes_and_the_leaves_its_walk_is_likely_to_end_at():
    tree = DraftTree.with_root(0)
    sure = tree.add(0, 1, math.log(0.9))
    for k in range(5):  # five unlikely leaves under the root
        tree.add(0, 10 + k, math.log(0.01))
    deep = tree.add(sure, 2, math.log(0.8))  # path 0.72: the walk often ends here
    odd = tree.add(sure, 3, math.log(0.05))  # path 0.045: just under LEAF_HEAD_PROB
    assert LEAF_HEAD_PROB == 0.05
    assert logit_nodes(tree) == [0, sure, deep] and odd not in logit_nodes(tree)
    few = DraftTree.with_root(0)
    few.add(few.add(0, 1, math.log(0.01)), 2, math.log(0.01))
    assert logit_nodes(few) == [0, 1, 2]  # few leaves: every row, whatever the probabilities


def test_prefill_computes_no_logits(target):
    rows = []
    handle = target.model.get_output_embeddings().register_forward_hook(lambda m, a, o: rows.append(1))
    try:
        with torch.inference_mode():
            Verifier(target).prefill(prompt_ids(13))
    finally:
        handle.remove()
    assert rows == []


@pytest.mark.parametrize(
    "config, word",
    [
        ({"sliding_window": 16, "use_sliding_window": True}, "sliding window"),
        ({"layer_types": ["full_attention", "linear_attention"]}, "linear_attention"),
    ],
)
def test_targets_without_full_attention_are_refused(config, word):
    cfg = tiny_config()
    for k, v in config.items():
        setattr(cfg, k, v)
    with pytest.raises(ConfigError, match=word):
        check_full_attention(cfg, "odd-model")
    check_full_attention(tiny_config(), "tiny")


# ---- sampling: every method emits the autoregressive sample of the seed ------------------------------------
@pytest.mark.slow  # seconds each: CI's second stage
@pytest.mark.parametrize("drafter_kind", ["self", "layers:1", "head", "ngram"])
def test_sampling_gives_the_autoregressive_sample_for_every_method(target, registry, head, drafter_kind):
    """At temperature > 0 the target's token at each position comes from position-keyed noise, so every
    method, sync or async, emits exactly what autoregressive sampling with the same seed emits."""
    config = DecodeConfig(temperature=0.9, seed=5, max_new_tokens=NEW_TOKENS)
    ar = run_to_end(target, None, TreeConfig(method="ar"), config, prompt_ids=prompt_ids(2)).output_ids
    other = run_to_end(
        target, None, TreeConfig(method="ar"), dataclasses.replace(config, seed=6), prompt_ids=prompt_ids(2)
    ).output_ids
    greedy = greedy_generate(target, prompt_ids(2), NEW_TOKENS)
    assert ar != other and ar != greedy
    for method in METHODS:
        if method.startswith("hybrid") and drafter_kind == "ngram":
            continue
        for execution in ("sync", "async"):
            trace = run_to_end(
                target,
                drafter_of(drafter_kind, method.removesuffix("-auto"), target, registry, head),
                METHODS[method],
                dataclasses.replace(config, execution=execution),
                prompt_ids=prompt_ids(2),
                cost_curve=curve_of(METHODS[method]),
            )
            assert trace.output_ids == ar, f"{method}/{drafter_kind}/{execution}"


def test_phases_add_up_to_the_runs_wall_clock(target, head):
    t0 = time.perf_counter()
    trace = run_to_end(
        target,
        HeadDrafter(head, target),
        METHODS["talon"],
        DecodeConfig(max_new_tokens=NEW_TOKENS),
        prompt_ids=prompt_ids(3),
        texts=False,
    )
    wall = time.perf_counter() - t0
    phases = trace.prefill_seconds + sum(
        s.draft_seconds + s.verify_seconds + s.bookkeeping_seconds for s in trace.steps
    )
    assert trace.seconds == pytest.approx(phases)
    assert wall - 0.05 < trace.seconds <= wall
    assert all(s.bookkeeping_seconds > 0 for s in trace.steps)
    # The drafter's root confidence, wherever it was asked (not at a last step with one token left).
    assert all(s.root_top1 is not None for s in trace.steps if s.drafter_forwards)
    assert not any(s.texts_filled for s in trace.steps)
    fill_texts(trace, target.tokenizer)
    assert all(s.texts_filled for s in trace.steps)
    assert trace.output_text == target.tokenizer.decode(trace.output_ids, skip_special_tokens=True)


def test_packed_cpu_linears_keep_greedy_output_equal_to_generate():
    """The oneDNN-packed linear layers (the CPU default for loaded models) on a copy of the tiny target:
    the decoding loop and ``generate()`` both run the packed model, and agree."""
    packed = tiny_target()
    assert pack_linears(packed.model) == 2 * 7 + 1  # q, k, v, o, gate, up, down per layer + LM head
    assert isinstance(packed.model.get_output_embeddings(), PackedLinear)
    for seed in PROMPT_SEEDS:
        expected = greedy_generate(packed, prompt_ids(seed), NEW_TOKENS)
        trace = run_to_end(
            packed,
            ModelDrafter(packed),
            METHODS["talon"],
            DecodeConfig(max_new_tokens=NEW_TOKENS),
            prompt_ids=prompt_ids(seed),
        )
        assert trace.output_ids == expected


def test_packed_linear_passes_gradients_through_its_input():
    """Training a draft head backpropagates through the target's (packed) LM head."""
    linear = torch.nn.Linear(8, 5)
    packed = PackedLinear(linear).requires_grad_(False)
    x = torch.randn(3, 8, requires_grad=True)
    packed(x).sum().backward()
    expected = torch.autograd.grad(linear(x).sum(), x)[0]
    assert torch.allclose(x.grad, expected, atol=1e-6)
    with torch.inference_mode():
        assert torch.allclose(packed(x.detach()), linear(x.detach()), atol=1e-5)


def test_prompt_lookup_refuses_n_gram_as_its_model_partner_naming_both_ways_to_ask(target, registry):
    """``hybrid`` with the n-gram drafter and ``lookup+ngram`` would be retrieval twice: refused, and the
    message names both (it spoke of the hybrid method to a user who had typed ``lookup+ngram``)."""
    for method, spec in (("hybrid", "ngram"), ("talon", "lookup+ngram")):
        with pytest.raises(ConfigError, match=r"merged with a model drafter \(the hybrid method, lookup\+SPEC\)"):
            drafter_for(method, spec, target, registry)


def test_the_cost_rule_learns_online_from_every_verdict(target, head):
    # Each step's expected tokens are its tree valued by the calibration as the run's earlier verdicts left
    # it: the drafter's prior, updated with steps 0..k-1 (README: "learned online").  Without the updates
    # the rule would plan with the prior alone.
    drafter = HeadDrafter(head, target)
    trace = run_to_end(
        target,
        drafter,
        METHODS["talon-auto"],
        DecodeConfig(max_new_tokens=40),
        prompt_ids=prompt_ids(2),
        cost_curve=CURVE,
        texts=False,
    )
    learned, fresh = Calibration(drafter.calibration_prior), Calibration(drafter.calibration_prior)
    moved = 0
    for step in trace.steps:
        assert step.expected == pytest.approx(learned.expected_tokens(step.tree)), step.index
        moved += abs(fresh.expected_tokens(step.tree) - step.expected) > 1e-6
        verdict = Verdict(step.status, step.accepted_path, step.bonus_token, step.target_token, step.target_prob)
        learned.observe(step.tree, verdict)
    assert moved >= len(trace.steps) // 2  # what the run learned changed most steps' values


def test_a_grown_buffer_is_written_and_read_where_it_now_lies():
    """Each layer's key and value views are cut once per buffer (``KVBuffer.write``): growing the buffer
    must move them with it, keeping the rows written before and writing the new ones into the new tensor."""
    buffer = KVBuffer(num_layers=2, kv_heads=3, head_dim=4, dtype=torch.float32, device=torch.device("cpu"), capacity=4)
    first, second = torch.randn(1, 3, 3, 4), torch.randn(1, 3, 2, 4)
    for start, rows in ((0, first), (3, second)):
        buffer.reserve(start + rows.shape[2])
        buffer.write_at = start
        for layer in range(2):
            keys, values = buffer.write(layer, rows + layer, -rows - layer)
    assert buffer.capacity == 8
    whole = torch.cat([first, second], dim=2)
    for layer in range(2):
        assert torch.equal(buffer.buffer[layer, 0, :, :5], (whole + layer)[0])
        assert torch.equal(buffer.buffer[layer, 1, :, :5], (-whole - layer)[0])
    assert torch.equal(keys, whole + 1) and torch.equal(values, -whole - 1)  # what layer 1's attention reads
