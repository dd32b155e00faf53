"""Engine tier: every method on the real embedded model must emit exactly what plain greedy
``model.generate`` emits (float32, CPU)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for, make_drafter
from talon.engine.decode import encode_prompt, new_trace, run, run_to_end
from talon.models.cpu_linear import onednn_linear_works
from talon.models.loaded import ModelLoadError
from talon.models.loading import load_model
from talon.models.row_invariant import INVARIANT_ATTENTION
from talon.runtime.cost_curve import CostCurve

pytestmark = pytest.mark.engine

EXAMPLES = [
    json.loads(line) for line in (Path(__file__).parent.parent / "assets" / "prompts.jsonl").read_text().splitlines()
]
PROMPTS = [e["prompt"] for e in EXAMPLES]
EXTRACTION = next(e["prompt"] for e in EXAMPLES if e["category"] == "extraction")
# Nine prompts covering every category of the examples.
GREEDY_PROMPTS = PROMPTS[0::2] + PROMPTS[1:4:2]


def _category(prompt: str) -> str:
    return next(e["category"] for e in EXAMPLES if e["prompt"] == prompt)


NEW_TOKENS = 48
METHOD_CONFIGS = {
    "chain": TreeConfig(method="chain", gamma=4),
    "static": TreeConfig(method="static", budget=12, depth=5),
    "eagle2": TreeConfig(method="eagle2", budget=12, topk=4, depth=4),
    "talon": TreeConfig(method="talon", budget=12, topk=4, mu=0.03),
}
DRAFTERS = ["ngram", "layers:4", "head"]


class GreedyReference(dict):
    """Token ids of plain HF greedy generation per prompt (stopping at EOS like ``run``), generated on
    first use: a test worker generates only the prompts of the tests it runs."""

    def __init__(self, target) -> None:
        super().__init__()
        self.target = target

    def __missing__(self, prompt: str) -> list[int]:
        ids = encode_prompt(self.target, prompt)
        gen = self.target.model.generate(
            torch.tensor([ids]),
            attention_mask=torch.ones(1, len(ids), dtype=torch.long),
            do_sample=False,
            max_new_tokens=NEW_TOKENS,
        )
        self[prompt] = gen[0, len(ids) :].tolist()
        return self[prompt]


@pytest.fixture(scope="module")
def greedy_reference(target) -> GreedyReference:
    return GreedyReference(target)


def test_prompt_set_is_varied():
    assert len(GREEDY_PROMPTS) >= 8 and len(set(GREEDY_PROMPTS)) == len(GREEDY_PROMPTS)
    assert {_category(p) for p in GREEDY_PROMPTS} == {e["category"] for e in EXAMPLES}


CELL_PROMPTS = {
    ("chain", "ngram"): (0, 4),
    ("static", "ngram"): (2, 3),
    ("eagle2", "ngram"): (5, 6),
    ("talon", "ngram"): (7, 1),
    ("chain", "layers:4"): (2, 8),
    ("static", "layers:4"): (0, 6),
    ("eagle2", "layers:4"): (7, 3),
    ("talon", "layers:4"): (5, 4),
    ("chain", "head"): (5, 1),
    ("static", "head"): (7, 4),
    ("eagle2", "head"): (0, 6),
    ("talon", "head"): (2, 3),
}
"""Two of ``GREEDY_PROMPTS`` (by index) per method x drafter: every prompt is met, every drafter meets
every category, and each cell has a prompt whose answer repeats the prompt's words (code, summarisation,
extraction, lists), where even the n-gram drafter gets drafts accepted.  Every prompt in every cell
would take four times as long for little more: the tiny-model tier runs every method and drafter on
many more contexts."""


def test_the_lossless_matrix_meets_every_prompt_and_category():
    assert set(CELL_PROMPTS) == {(m, d) for m in METHOD_CONFIGS for d in DRAFTERS}
    assert {i for cell in CELL_PROMPTS.values() for i in cell} == set(range(len(GREEDY_PROMPTS)))
    every = {_category(p) for p in GREEDY_PROMPTS}
    for drafter_spec in DRAFTERS:
        met = {_category(GREEDY_PROMPTS[i]) for (_, d), cell in CELL_PROMPTS.items() if d == drafter_spec for i in cell}
        assert met == every, drafter_spec
    copyable = ("code", "summarisation", "extraction", "lists")
    assert all(any(_category(GREEDY_PROMPTS[i]) in copyable for i in cell) for cell in CELL_PROMPTS.values())


@pytest.mark.parametrize("drafter_spec", DRAFTERS)
@pytest.mark.parametrize("method", list(METHOD_CONFIGS))
def test_greedy_is_lossless(target, greedy_reference, method, drafter_spec):
    mats = []
    for prompt in (GREEDY_PROMPTS[i] for i in CELL_PROMPTS[method, drafter_spec]):
        trace = run_to_end(
            target,
            make_drafter(drafter_spec, target),
            METHOD_CONFIGS[method],
            DecodeConfig(max_new_tokens=NEW_TOKENS),
            prompt,
        )
        assert trace.output_ids == greedy_reference[prompt], f"{method}/{drafter_spec} diverged on {prompt!r}"
        assert all(s.tree.num_drafts <= max(12, METHOD_CONFIGS[method].gamma) for s in trace.steps)
        mats.append(len(trace.output_ids) / len(trace.steps))
    # The drafters are real: somewhere in the prompt set they get tokens accepted.
    assert max(mats) > 1.0


CPU_LIKE = CostCurve(
    plain=0.045,
    verify=tuple((n, 0.045 * r) for n, r in ((1, 1.0), (2, 1.1), (4, 1.2), (8, 1.4), (16, 1.8), (32, 2.5), (64, 4.1))),
    call=tuple((w, 0.045 * r) for w, r in ((1, 0.08), (8, 0.12), (64, 0.67))),
)
"""A cost curve shaped like the 2-core CPU's (fixed, so the test does not depend on this machine's load)."""


@pytest.mark.parametrize("method", ["talon", "eagle2", "hybrid"])
def test_auto_sized_trees_are_lossless_and_change_size(target, greedy_reference, method):
    cfg = TreeConfig(method=method, budget=128, topk=6, mu=0.1, depth=6, auto=True)
    sizes, stops = set(), set()
    for prompt in GREEDY_PROMPTS[1:3]:  # code and math: confident enough that trees grow past one layer
        drafter = drafter_for(method, "head", target)
        trace = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=NEW_TOKENS), prompt, cost_curve=CPU_LIKE)
        assert trace.output_ids == greedy_reference[prompt], f"auto {method} diverged on {prompt!r}"
        sizes |= {s.tree.num_drafts for s in trace.steps}
        stops |= {s.stop for s in trace.steps}
        assert all(s.price == pytest.approx(CPU_LIKE.price(len(s.tree), s.call_widths)) for s in trace.steps)
    assert len(sizes) > 3 and "cost" in stops


def test_autoregressive_matches_generate(target, greedy_reference):
    for prompt in GREEDY_PROMPTS[:3]:
        trace = run_to_end(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=NEW_TOKENS), prompt)
        assert trace.output_ids == greedy_reference[prompt]
        assert len(trace.steps) == len(trace.output_ids)  # one target forward per token


def test_step_records_are_consistent(target):
    trace = run_to_end(
        target,
        make_drafter("ngram", target),
        TreeConfig(method="talon", budget=16),
        DecodeConfig(max_new_tokens=32),
        EXTRACTION,
    )
    for step in trace.steps:
        tree = step.tree
        assert len(step.status) == len(tree) == len(step.node_text) == len(step.target_prob)
        path_tokens = [tree.token[n] for n in step.accepted_path[1:]]
        assert step.committed_ids[: len(path_tokens)] == path_tokens[: len(step.committed_ids)]
        assert step.target_token[step.accepted_path[-1]] == step.bonus_token
        assert all(step.status[n] == "accepted" for n in step.accepted_path[1:])
    assert trace.output_text == target.tokenizer.decode(trace.output_ids, skip_special_tokens=True)
    assert trace.stop_reason in ("eos", "max_new_tokens")
    # The n-gram drafter copies names from this extraction prompt: some step accepts a draft.
    assert any(s.accepted_tokens > 0 for s in trace.steps)


def test_sampling_is_seeded_and_runs_every_method(target):
    cfg = DecodeConfig(temperature=0.8, seed=7, max_new_tokens=24)
    first = run_to_end(target, make_drafter("ngram", target), METHOD_CONFIGS["talon"], cfg, PROMPTS[0])
    again = run_to_end(target, make_drafter("ngram", target), METHOD_CONFIGS["talon"], cfg, PROMPTS[0])
    assert first.output_ids == again.output_ids
    for method, tree_cfg in METHOD_CONFIGS.items():
        trace = run_to_end(target, make_drafter("layers:4", target), tree_cfg, cfg, PROMPTS[1])
        assert 0 < len(trace.output_ids) <= 24, method


def test_stop_between_steps(target):
    trace = new_trace(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=40), PROMPTS[0])
    steps = list(
        run(
            trace,
            target,
            None,
            TreeConfig(method="ar"),
            DecodeConfig(max_new_tokens=40),
            stop=lambda: len(trace.steps) >= 3,
        )
    )
    assert len(steps) == 3 and trace.stop_reason == "stopped"


@pytest.mark.parametrize("prompt", ["", "   \n"])
def test_empty_prompt_is_refused(target, prompt):
    with pytest.raises(ConfigError, match="empty"):
        new_trace(target, None, TreeConfig(method="ar"), DecodeConfig(), prompt)


def test_prompt_longer_than_context_is_refused(target):
    long_ids = [target.tokenizer.eos_token_id + 100] * (target.context_length - 10)
    with pytest.raises(ConfigError, match="context"):
        new_trace(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=64), "x", prompt_ids=long_ids)


def test_tree_method_without_drafter_is_refused(target):
    with pytest.raises(ConfigError, match="drafter"):
        new_trace(target, None, TreeConfig(method="talon"), DecodeConfig(), "hello")


@pytest.mark.parametrize(
    "spec, match",
    [
        ("layers:x", "whole number"),
        ("layers:99", "layers:K"),
        ("", "No drafter"),
        ("/no/such/model/dir", "no directory"),
    ],
)
def test_bad_drafter_specs_are_refused(target, spec, match):
    with pytest.raises((ConfigError, ModelLoadError), match=match):
        make_drafter(spec, target)


@pytest.mark.skipif(not onednn_linear_works(torch.bfloat16), reason="no packed bfloat16 linear on this CPU")
def test_a_bfloat16_target_is_exact_with_the_row_invariant_forward():
    """The embedded model in bfloat16 takes the row-invariant forward, and auto-sized TALON, EAGLE-2
    and hybrid trees with the head emit plain bfloat16 decoding's tokens on a prompt of every category
    (the stock bfloat16 forward differed on 7 of 14 example prompts), as does fixed N=60 TALON."""
    bf16 = load_model("embedded", device=torch.device("cpu"), dtype=torch.bfloat16)
    assert bf16.model.config._attn_implementation == INVARIANT_ATTENTION
    configs = {m: TreeConfig(method=m, budget=128, topk=6, mu=0.1, auto=True) for m in ("talon", "eagle2", "hybrid")}
    for k, prompt in enumerate(GREEDY_PROMPTS):
        dec = DecodeConfig(max_new_tokens=NEW_TOKENS)
        plain = run_to_end(bf16, None, TreeConfig(method="ar"), dec, prompt).output_ids
        method = ("talon", "eagle2", "hybrid")[k % 3]
        runs = {method: (configs[method], CPU_LIKE), "talon N=60": (TreeConfig(method="talon", budget=60), None)}
        for name, (cfg, curve) in runs.items():
            drafter = drafter_for(cfg.method, "head", bf16)
            trace = run_to_end(bf16, drafter, cfg, dec, prompt, cost_curve=curve)
            assert trace.output_ids == plain, f"bfloat16 {name} diverged on {prompt!r}"


def test_a_frozen_step_of_a_run_is_the_runs_own_step(target):
    """The Tree lab and "Why this shape?" rebuild a step from the run replayed up to it: on the real model a
    context prefilled in one piece has other last bits than the run's own caches (other row counts, other
    kernels), which reorders close candidates in most steps of a 24-node tree; the replayed state gives the
    run's own tree and verdict at every step tried."""
    from talon.engine.decode import replay
    from talon.engine.frozen_step import FrozenStep
    from talon.models.registry import ModelRegistry

    registry = ModelRegistry()
    cfg = TreeConfig(method="talon", budget=24, topk=6, mu=0.1)
    ran = run_to_end(target, make_drafter("head", target, registry), cfg, DecodeConfig(max_new_tokens=40), PROMPTS[0])
    tried = list(range(2, len(ran.steps), 4))
    assert len(tried) >= 3
    for k in tried:
        replayed = replay(ran, target, make_drafter("head", target, registry), k)
        assert replayed is not None, k
        got = FrozenStep.of_run(target, registry, "head", ran, k, replayed=replayed).explore(cfg, k)
        step = ran.steps[k]
        assert (got.tree.token, got.tree.parent, got.accepted_path) == (
            step.tree.token,
            step.tree.parent,
            step.accepted_path,
        ), k
