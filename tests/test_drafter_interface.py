"""The narrow drafter interface on the tiny target: every drafter crops itself to the common prefix of
what it saw and the sequence it is handed, so a detour (a guess drafted ahead, right or wrong; a step
drafted again at the same context) leaves it exactly where a drafter fed the true sequence directly is.

For the draft head this covers its stand-in features: a guessed position reads the head's own state
until the target's features arrive, and then the cache rows built on the stand-ins are recomputed."""

from __future__ import annotations

import pytest
import torch

from talon.drafters.base import common_prefix
from talon.drafters.factory import make_drafter
from talon.drafters.head import HeadDrafter
from talon.engine.builders import TalonBuilder
from talon.engine.speculation import speculate
from talon.engine.verify import Verifier
from talon.models.registry import ModelRegistry
from tests.tiny import prompt_ids, random_head, tiny_target

TALON = TalonBuilder(budget=10, topk=3, mu=0.1)


@pytest.fixture(scope="module")
def target():
    return tiny_target()


def features_of(target, drafter, ids: list[int]) -> torch.Tensor | None:
    """The target's states at every position of ``ids`` but the last (``None`` if the drafter reads none)."""
    if not drafter.feature_layers:
        return None
    verifier = Verifier(target, drafter.feature_layers)
    verifier.prefill(ids)
    return verifier.features


def make(kind: str, target):
    if kind == "head":
        return HeadDrafter(random_head(target), target)
    return make_drafter(kind, target, ModelRegistry())


def root_and_layer(drafter, target, committed: list[int], features) -> tuple[torch.Tensor, torch.Tensor]:
    """The root proposal at ``committed`` and the proposal one layer down (below the root's 3 best)."""
    built = TALON.build(drafter, committed, features)
    layer1 = [n for n in range(1, len(built.tree)) if built.tree.depth[n] == 1]
    return built.root_logprobs, drafter.propose(built.tree, layer1).logprobs


KINDS = ["head", "layers:1", "ngram", "lookup+layers:1"]


@pytest.mark.parametrize("kind", KINDS)
@pytest.mark.parametrize("guess_right", [True, False])
def test_a_detour_through_a_guess_leaves_the_drafter_where_a_direct_one_is(target, kind, guess_right):
    """The async protocol (``speculate``: a guessed outcome drafted before the target's states exist for
    it), then the true sequence: right guesses twice in a row, or a wrong one.  The prompt repeats
    itself, so prompt lookup has something to propose."""
    prompt = prompt_ids(3, length=6) * 2
    detour, direct = make(kind, target), make(kind, target)
    start = features_of(target, detour, prompt)
    detour.start(prompt, start)
    direct.start(prompt, start)
    built = TALON.build(detour, prompt, start)
    spec = speculate(detour, TALON, built, prompt, start, None, 0.0)
    assert spec.guess and spec.built is not None
    if guess_right:
        true = prompt + spec.guess  # a hit: the next tree is spec.built; the worker guesses on from it
        spec = speculate(detour, TALON, spec.built, true, features_of(target, detour, true), None, 0.0)
        true = true + spec.guess
    else:  # a miss at the guess's last token (the guessed bonus), then more
        wrong = 2 if spec.guess[-1] != 2 else 3
        true = prompt + spec.guess[:-1] + [wrong, 5]
    full = features_of(target, detour, true)
    got = root_and_layer(detour, target, true, full)
    want = root_and_layer(direct, target, true, full)
    for a, b in zip(got, want):
        finite = torch.isfinite(b)
        assert torch.equal(torch.isfinite(a), finite)
        assert torch.allclose(a[finite], b[finite], atol=1e-5)


@pytest.mark.parametrize("kind", KINDS)
def test_the_same_context_drafts_the_same_tree_again(target, kind):
    prompt = prompt_ids(6, length=12)
    drafter = make(kind, target)
    features = features_of(target, drafter, prompt)
    drafter.start(prompt, features)
    trees = [TALON.build(drafter, prompt, features).tree for _ in range(3)]
    assert all((t.token, t.parent) == (trees[0].token, trees[0].parent) for t in trees)


def test_the_head_refuses_a_position_it_has_no_feature_for(target):
    drafter = make("head", target)
    prompt = prompt_ids(7, length=8)
    features = features_of(target, drafter, prompt)
    drafter.start(prompt, features)
    with pytest.raises(RuntimeError, match="no target features for position"):
        drafter.begin_step(prompt + [5, 6, 7], features)  # tokens it never drafted, no states for them


def test_stand_ins_are_replaced_by_the_targets_features(target):
    """Mutation guard for the head: after a right guess the head's root proposal at the true sequence
    differs from one still built on its own stand-in states (so the equality above is not trivial)."""
    prompt = prompt_ids(3, length=10)
    drafter = make("head", target)
    start = features_of(target, drafter, prompt)
    drafter.start(prompt, start)
    spec = speculate(drafter, TALON, TALON.build(drafter, prompt, start), prompt, start, None, 0.0)
    true = prompt + spec.guess
    on_standins = drafter.begin_step(true, start).logprobs  # the target's states for the guess not given
    replaced = drafter.begin_step(true, features_of(target, drafter, true)).logprobs
    assert not torch.allclose(on_standins, replaced, atol=1e-3)


@pytest.mark.parametrize(
    "a, b, n",
    [
        ([], [1], 0),
        ([1, 2, 3], [1, 2, 3], 3),
        ([1, 2, 3], [1, 2], 2),
        ([1, 2, 3], [1, 5, 3], 1),
        ((4, 5), [4, 5, 6], 2),
        ([7], [8], 0),
    ],
)
def test_common_prefix(a, b, n):
    assert common_prefix(a, b) == n


def test_a_draft_model_with_a_head_of_another_size_drafts_for_the_target(tmp_path):
    """A model family pads its LM heads to different sizes over one tokenizer (Qwen2.5: 152,064 rows for 7B,
    151,936 for 0.5B): the drafter's proposals are fitted to the target's rows (hybrid crashed merging them
    with prompt lookup's), and a drafter that cannot embed every token of the tokenizer is refused at load."""
    from transformers import LlamaForCausalLM

    from talon.config import DecodeConfig, TreeConfig
    from talon.drafters.factory import drafter_for
    from talon.engine.decode import run_to_end
    from talon.models.loaded import ModelLoadError
    from tests.tiny import greedy_generate, tiny_config, tiny_tokenizer

    target = tiny_target(layers=2)
    for rows in (72, 56):
        config = tiny_config(1)
        config.vocab_size = rows
        torch.manual_seed(1)
        path = tmp_path / f"draft{rows}"
        LlamaForCausalLM(config).save_pretrained(path)
        tiny_tokenizer().save_pretrained(path)
        for method in ("talon", "hybrid"):
            if rows < target.vocab_size:
                with pytest.raises(ModelLoadError, match="could not read every token"):
                    drafter_for(method, str(path), target, ModelRegistry())
                continue
            drafter = drafter_for(method, str(path), target, ModelRegistry())
            cfg = TreeConfig(method=method, budget=8, topk=2)
            trace = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=12), prompt_ids=prompt_ids(1))
            assert trace.output_ids == greedy_generate(target, prompt_ids(1), 12), method


def test_drafter_keywords_read_in_any_case_and_spacing_and_locations_as_typed():
    """Typed "Ngram" or "lookup + head", a drafter was taken for a Hub id and failed offline as a model not
    in the cache; a location after ``:`` (a path, a Hub id) keeps its case."""
    from talon.drafters.factory import parse_drafter_spec

    assert parse_drafter_spec("Ngram").kind == "ngram" and parse_drafter_spec(" HEAD ").kind == "head"
    assert parse_drafter_spec("layers : 4").layers == 4
    both = parse_drafter_spec("Lookup + Head")
    assert both.kind == "with_lookup" and both.inner.kind == "head"
    eagle = parse_drafter_spec("EAGLE3:yuhuili/EAGLE3-LLaMA3.1-Instruct-8B")
    assert eagle.kind == "eagle3" and eagle.location == "yuhuili/EAGLE3-LLaMA3.1-Instruct-8B"
    for hub_id in ("HuggingFaceTB/SmolLM2-135M-Instruct", "Headquarters/model", "ngrams"):
        spec = parse_drafter_spec(hub_id)
        assert spec.kind == "model" and spec.location == hub_id


def test_an_async_guess_near_the_token_limit_drafts_no_deeper_than_the_run_can_commit(target):
    """The next tree drafted from a guess may hold only what the run can still commit after the guess
    and that tree's own bonus token: ``room`` draft layers, not one more."""
    prompt = prompt_ids(3, length=6) * 2
    drafter = make("head", target)
    start = features_of(target, drafter, prompt)
    drafter.start(prompt, start)
    deep = TalonBuilder(budget=12, topk=1, mu=0.99)  # about a chain: deep enough to cut
    built = deep.build(drafter, prompt, start)
    free = speculate(drafter, deep, built, prompt, start, None, 0.0)
    assert free.built.tree.max_depth >= 3
    for room in (1, 2):
        left = len(free.guess) + 1 + room
        spec = speculate(drafter, deep, built, prompt, start, None, 0.0, tokens_left=left)
        assert spec.guess == free.guess and spec.built.tree.max_depth == room
