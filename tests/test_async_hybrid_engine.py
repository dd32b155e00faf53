"""Engine tier for hybrid drafting and async execution on the real embedded model: both emit exactly
what synchronous / autoregressive greedy decoding emits, speculative drafts never leak, and async
runs end cleanly on EOS, max tokens and Stop."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for, make_drafter
from talon.engine.decode import new_trace, run, run_to_end

pytestmark = pytest.mark.engine

EXAMPLES = [
    json.loads(line) for line in (Path(__file__).parent.parent / "assets" / "prompts.jsonl").read_text().splitlines()
]
BY_CATEGORY = {e["category"]: e["prompt"] for e in EXAMPLES}
PROMPTS = [BY_CATEGORY[c] for c in ("chat", "code", "extraction", "summarisation")]
NEW_TOKENS = 40
TALON = TreeConfig(method="talon", budget=12, topk=4, mu=0.03)
HYBRID = TreeConfig(method="hybrid", budget=12, topk=4, mu=0.03)


@pytest.fixture(scope="module")
def reference(target):
    """Autoregressive greedy output per prompt."""
    return {
        p: run_to_end(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=NEW_TOKENS), p).output_ids
        for p in PROMPTS
    }


@pytest.mark.parametrize("drafter_spec", ["head", "layers:4"])
def test_hybrid_is_lossless_and_uses_both_sources(target, reference, drafter_spec):
    sources = set()
    for prompt in PROMPTS:
        trace = run_to_end(
            target, drafter_for("hybrid", drafter_spec, target), HYBRID, DecodeConfig(max_new_tokens=NEW_TOKENS), prompt
        )
        assert trace.output_ids == reference[prompt], f"hybrid/{drafter_spec} diverged on {prompt!r}"
        assert all(s.tree.num_drafts <= HYBRID.budget for s in trace.steps)
        assert all(0.0 < s.drafter_info["retrieval_weight"] < 1.0 for s in trace.steps)
        sources |= {src for s in trace.steps for src in s.tree.source[1:]}
    assert sources == {"model", "retrieval"}


def test_hybrid_spec_and_method_agree(target):
    prompt = BY_CATEGORY["extraction"]
    by_method = run_to_end(
        target, drafter_for("hybrid", "layers:4", target), HYBRID, DecodeConfig(max_new_tokens=16), prompt
    )
    by_spec = run_to_end(
        target, make_drafter("hybrid:layers:4", target), TALON, DecodeConfig(max_new_tokens=16), prompt
    )
    assert [s.tree.token for s in by_method.steps] == [s.tree.token for s in by_spec.steps]
    with pytest.raises(ConfigError, match="hybrid"):
        drafter_for("hybrid", "ngram", target)


@pytest.mark.parametrize(
    "method, drafter_spec",
    [("talon", "ngram"), ("talon", "layers:4"), ("chain", "head"), ("hybrid", "head"), ("eagle2", "head")],
)
def test_async_emits_the_synchronous_tokens(target, reference, method, drafter_spec):
    cfg = TreeConfig(method=method, budget=12, topk=4, mu=0.03, depth=4, gamma=4)
    for prompt in PROMPTS[0::2]:  # chat (guesses often wrong) and extraction (often right)
        trace = run_to_end(
            target,
            drafter_for(method, drafter_spec, target),
            cfg,
            DecodeConfig(max_new_tokens=NEW_TOKENS, execution="async"),
            prompt,
        )
        assert trace.execution == "async"
        assert trace.output_ids == reference[prompt], f"async {method}/{drafter_spec} diverged on {prompt!r}"
        assert all(s.speculate_hit is not None for s in trace.steps[:-1])


def test_async_trees_equal_sync_trees_for_a_model_drafter(target):
    """A model drafter's state after a right guess is exactly the synchronous one, so the trees match."""
    prompt = BY_CATEGORY["code"]
    traces = {
        ex: run_to_end(
            target, make_drafter("layers:4", target), TALON, DecodeConfig(max_new_tokens=24, execution=ex), prompt
        )
        for ex in ("sync", "async")
    }
    assert [s.tree.token for s in traces["sync"].steps] == [s.tree.token for s in traces["async"].steps]


def test_async_sampling_matches_sync_with_the_same_seed(target):
    prompt = BY_CATEGORY["chat"]
    outs = [
        run_to_end(
            target,
            make_drafter("layers:4", target),
            TALON,
            DecodeConfig(max_new_tokens=24, temperature=0.8, seed=3, execution=ex),
            prompt,
        ).output_ids
        for ex in ("sync", "async")
    ]
    assert outs[0] == outs[1]


class _WrongGuesses:
    """Wraps a drafter so every speculative guess is off: on the drafting thread, the guessed tokens
    past the sequence the decoding thread last handed it become tokens the target will not produce.
    Records what was drafted from speculatively."""

    def __init__(self, inner):
        self.inner = inner
        self.speculated: list[list[int]] = []
        self._committed = 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def begin_step(self, committed_ids, target_features=None):
        committed = list(committed_ids)
        if threading.current_thread().name.startswith("talon-drafter"):
            committed[self._committed :] = [0] * (len(committed) - self._committed)  # token 0 never follows here
            self.speculated.append(committed[self._committed :])
        else:
            self._committed = len(committed)
        return self.inner.begin_step(committed, target_features)


def test_rejected_speculation_never_reaches_the_output(target, reference):
    prompt = PROMPTS[0]
    drafter = _WrongGuesses(make_drafter("layers:4", target))
    trace = new_trace(target, drafter.inner, TALON, DecodeConfig(max_new_tokens=NEW_TOKENS, execution="async"), prompt)
    for _ in run(trace, target, drafter, TALON, DecodeConfig(max_new_tokens=NEW_TOKENS, execution="async")):
        pass
    assert drafter.speculated, "no speculation happened"
    assert not any(s.speculate_hit for s in trace.steps)
    assert trace.output_ids == reference[prompt]
    assert 0 not in trace.output_ids


def _drafter_threads() -> int:
    return sum(t.name.startswith("talon-drafter") for t in threading.enumerate())


def test_async_stops_cleanly(target, reference):
    prompt = PROMPTS[1]
    async_cfg = DecodeConfig(max_new_tokens=5, execution="async")
    trace = run_to_end(target, make_drafter("layers:4", target), TALON, async_cfg, prompt)
    assert trace.stop_reason == "max_new_tokens" and trace.output_ids == reference[prompt][:5]

    short = "Answer with one word: is the sky blue?"
    ar = run_to_end(target, None, TreeConfig(method="ar"), DecodeConfig(max_new_tokens=64), short)
    asy = run_to_end(
        target, make_drafter("layers:4", target), TALON, DecodeConfig(max_new_tokens=64, execution="async"), short
    )
    assert ar.stop_reason == asy.stop_reason == "eos" and asy.output_ids == ar.output_ids

    cfg = DecodeConfig(max_new_tokens=NEW_TOKENS, execution="async")
    trace = new_trace(target, make_drafter("layers:4", target), TALON, cfg, prompt)
    made: list = []
    for step in run(trace, target, make_drafter("layers:4", target), TALON, cfg, stop=lambda: len(made) >= 2):
        made.append(step)
    assert trace.stop_reason == "stopped" and len(trace.steps) == 2
    assert _drafter_threads() == 0

    gen = run(
        new_trace(target, make_drafter("layers:4", target), TALON, cfg, prompt),
        target,
        make_drafter("layers:4", target),
        TALON,
        cfg,
    )
    next(gen)
    gen.close()  # the consumer walks away mid-run (app Stop)
    assert _drafter_threads() == 0
