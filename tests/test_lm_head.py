"""The screened LM head (``talon.models.lm_head``): bfloat16 scores, float32 picks.

The pick must be the float32 argmax (and at temperature > 0 the float32 argmax of the tempered logits
plus noise) even where bfloat16 cannot tell two tokens apart; the probabilities must stay close to
float32's.  Each check runs on the emulated product (every machine) and, where this CPU has native
bfloat16 linears, on oneDNN's packed kernel.
"""

from __future__ import annotations

import dataclasses
import json
import types

import pytest
import torch

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.head import HeadDrafter
from talon.engine.decode import run_to_end
from talon.models import device, kernel_store, row_top
from talon.models.cpu_linear import onednn_linear_works
from talon.models.lm_head import SCREEN_REPS, FullScores, ScreenedHead, ScreenedScores, row_scores, screen_for
from tests.other_work import others_took
from tests.tiny import greedy_generate, prompt_ids, random_head, tiny_target

NATIVE = [False] + ([True] if onednn_linear_works(torch.bfloat16) else [])


def near_tie_weights(vocab: int = 512, hidden: int = 576, seed: int = 0) -> torch.Tensor:
    """Random LM-head rows in which every odd row is its even neighbour nudged by 1e-3 of a typical
    logit: bfloat16 (8 significant bits) cannot order such pairs, float32 can."""
    g = torch.Generator().manual_seed(seed)
    w = torch.randn(vocab, hidden, generator=g) * 0.05
    w[1::2] = w[0::2] * (1 + 1e-3 * torch.randn(vocab // 2, 1, generator=g).sign())
    return w


def hidden_rows(rows: int, hidden: int = 576, seed: int = 1, spread: float = 8.0) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(rows, hidden, generator=g) * spread


def every_error(scores: ScreenedScores) -> torch.Tensor:
    """``scores.error`` of every row and token ``[rows, vocab]``."""
    rows, vocab = scores.approx.shape
    return scores.error(torch.arange(rows)[:, None], torch.arange(vocab)[None, :], 1.0)


@pytest.mark.parametrize("native", NATIVE)
def test_bfloat16_scores_stay_within_the_bound(native: bool) -> None:
    w, h = near_tie_weights(), hidden_rows(64)
    scores = ScreenedHead(w, native=native).scores(h)
    exact = h @ w.T
    assert ((scores.approx - exact).abs() <= every_error(scores)).all()
    assert (scores.approx - exact).abs().max() > 1e-3  # the bound is not trivially met: bfloat16 is coarse


@pytest.mark.parametrize("native", NATIVE)
def test_the_bound_holds_where_every_rounding_errs_one_way(native: bool) -> None:
    """Every input rounds down by nearly u and the float32 sum 257 rounds on output to 256: an error of
    2.9 where the inputs' part of the bound allows 2.05, the output's rounding adding the rest."""
    v = 1 + 2**-8 - 2**-12  # rounds to 1 in bfloat16
    w, h = torch.full((3, 257), v), torch.full((1, 257), v)
    w[1], w[2] = 1.0, -0.5
    scores = ScreenedHead(w, native=native).scores(h)
    error = (scores.approx - h @ w.T).abs()
    assert scores.approx[0, 0] == 256 and error[0, 0] > 2.8
    assert (error > scores.radius[:, None] * scores.head.row_norms).any()  # the inputs' part alone fails
    assert (error <= every_error(scores)).all()


@pytest.mark.parametrize("native", NATIVE)
def test_greedy_pick_is_the_float32_argmax_where_bfloat16_alone_is_not(native: bool) -> None:
    w, h = near_tie_weights(), hidden_rows(200)
    scores = ScreenedHead(w, native=native).scores(h)
    exact = h @ w.T
    assert scores.pick(0.0, None) == exact.argmax(dim=1).tolist()
    assert (scores.approx.argmax(dim=1) != exact.argmax(dim=1)).any()  # the negative control


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("temperature", [0.7, 1.0, 2.5])
def test_sampling_pick_is_the_float32_argmax_of_tempered_logits_plus_noise(native: bool, temperature: float) -> None:
    w, h = near_tie_weights(), hidden_rows(100, spread=2.0)
    g = torch.Generator().manual_seed(7)
    noise = -torch.log(-torch.log(torch.rand(100, w.shape[0], generator=g)))
    scores = ScreenedHead(w, native=native).scores(h)
    want = ((h @ w.T) / temperature + noise).argmax(dim=1).tolist()
    assert scores.pick(temperature, noise) == want
    assert FullScores(h @ w.T).pick(temperature, noise) == want


def test_exact_ties_go_to_the_lowest_token_id_as_argmax_does() -> None:
    w = near_tie_weights(64, 64)
    w[40] = w[9]  # token 40 ties token 9 exactly
    h = w[9:10] * 10  # token 9's own direction: 9 (and 40) score highest
    assert ScreenedHead(w, native=False).scores(h).pick(0.0, None) == [9] == (h @ w.T).argmax(dim=1).tolist()


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_token_probabilities_are_close_to_float32(native: bool, temperature: float) -> None:
    w = near_tie_weights(4096, 576)
    h = hidden_rows(6, spread=12.0)  # peaked rows: one token holds most of the mass
    logits = h @ w.T
    rows = torch.arange(6).repeat_interleave(5).tolist()
    tokens = logits.topk(5, dim=1).indices.flatten().tolist()
    got = ScreenedHead(w, native=native).scores(h).token_probs(rows, tokens, temperature)
    want = FullScores(logits).token_probs(rows, tokens, temperature)
    assert want.max() > 0.5
    assert torch.allclose(got, want, atol=2e-3)


def test_the_screen_is_only_made_where_logits_are_the_heads_output() -> None:
    plain = tiny_target()
    if onednn_linear_works(torch.bfloat16):
        assert ScreenedHead.for_model(plain.model) is not None
    else:
        assert ScreenedHead.for_model(plain.model) is None  # no native bfloat16 linears here
    for field, value in (("logit_scale", 0.5), ("final_logit_softcapping", 30.0)):
        model = tiny_target().model
        setattr(model.config, field, value)
        assert ScreenedHead.for_model(model) is None
    double = tiny_target().model.double()
    assert ScreenedHead.for_model(double) is None


def screened(seed: int = 0):
    """The tiny target with an (emulated) screen on its LM head."""
    target = tiny_target(seed)
    return dataclasses.replace(target, screen=ScreenedHead(target.model.lm_head.weight, native=False))


def test_row_scores_screen_where_the_model_has_a_screen() -> None:
    assert isinstance(row_scores(screened(), torch.randn(40, 64)), ScreenedScores)
    assert isinstance(row_scores(tiny_target(), torch.randn(1, 64)), FullScores)


@pytest.mark.parametrize("method", ["ar", "talon", "eagle2"])
def test_decoding_with_the_screen_equals_greedy_decoding(method: str) -> None:
    target = screened()
    cfg = TreeConfig(method=method, budget=6, topk=3, mu=0.1, depth=3)
    for seed in range(3):
        ids = prompt_ids(seed)
        drafter = HeadDrafter(random_head(target), target) if method != "ar" else None
        trace = run_to_end(target, drafter, cfg, DecodeConfig(max_new_tokens=24), prompt_ids=ids, texts=False)
        assert trace.output_ids == greedy_generate(target, ids, 24)
        assert any(len(s.tree) > 1 for s in trace.steps) or method == "ar"
        probs = [p for s in trace.steps for p in s.target_prob[1:]]
        assert all(0.0 <= p <= 1.0 for p in probs)


def test_sampling_with_the_screen_emits_the_float32_ar_sample() -> None:
    target, plain = screened(), tiny_target()
    dec = DecodeConfig(max_new_tokens=24, temperature=0.9, seed=3)
    for seed in range(3):
        ids = prompt_ids(seed)
        want = run_to_end(plain, None, TreeConfig(method="ar"), dec, prompt_ids=ids, texts=False).output_ids
        for method in ("ar", "talon"):
            drafter = HeadDrafter(random_head(target), target) if method != "ar" else None
            cfg = TreeConfig(method=method, budget=6, topk=3, mu=0.1)
            assert run_to_end(target, drafter, cfg, dec, prompt_ids=ids, texts=False).output_ids == want


@pytest.fixture
def kept_choices(monkeypatch, tmp_path):
    """An empty store of kept choices; the machine scripted quiet while the screen is timed."""
    monkeypatch.setattr(kernel_store, "cache_root", lambda: tmp_path)
    monkeypatch.delenv(kernel_store.RETIME_ENV, raising=False)
    monkeypatch.setattr(device, "OtherWork", others_took(0.01))
    return tmp_path


def scripted_heads(monkeypatch, times: list[float]) -> list[int]:
    """Every model screenable (emulated), ``fastest_each`` answering ``times`` (float32, screened); the
    list returned counts the timings."""
    calls = []

    def fake(fns, reps):
        calls.append(reps)
        for fn in fns:
            fn()  # each head picks (and gives probabilities) at every timed row count
        return times

    monkeypatch.setattr(ScreenedHead, "for_model", classmethod(lambda cls, m: cls(m.lm_head.weight, native=False)))
    monkeypatch.setattr("talon.models.lm_head.fastest_each", fake)
    return calls


def test_a_screen_that_is_not_faster_here_is_not_kept(monkeypatch, kept_choices) -> None:
    times = [1.0, 0.95]  # float32, then screened: within MARGIN (0.9) of it is not enough
    scripted_heads(monkeypatch, times)
    assert screen_for(tiny_target().model) is None
    monkeypatch.setenv(kernel_store.RETIME_ENV, "1")
    times[1] = 0.5
    assert isinstance(screen_for(tiny_target().model), ScreenedHead)


@pytest.mark.parametrize("share", [0.01, 0.3, None])
def test_the_screen_choice_is_kept_for_the_machine_when_timed_on_a_quiet_one(monkeypatch, kept_choices, share) -> None:
    """Later loads read a choice timed on a quiet machine without timing (the two heads are often within a
    few per cent, and a choice timed anew went either way); one timed while others worked, or where the
    share is unknown, serves its own load only."""
    monkeypatch.setattr(device, "OtherWork", others_took(share))
    times = [1.0, 0.5]
    calls = scripted_heads(monkeypatch, times)
    assert isinstance(screen_for(tiny_target().model), ScreenedHead)
    times[1] = 2.0  # what a second timing would find
    second = screen_for(tiny_target().model)
    if share == 0.01:
        assert isinstance(second, ScreenedHead) and calls == [SCREEN_REPS]
        assert [json.loads(p.read_text())["screen"] for p in kept_choices.rglob("*.json")] == [True]
    else:
        assert second is None and calls == [SCREEN_REPS, SCREEN_REPS]
        assert not list(kept_choices.rglob("*.json"))


def test_a_screen_choice_timed_against_a_float32_head_is_not_read_for_a_coded_one(monkeypatch, kept_choices) -> None:
    """A float32 head streamed as its 8-bit codes reads a quarter of the bytes, and so can beat the screen
    where the float32 matrix did not: a choice kept for one is timed again for the other."""
    times = [1.0, 0.5]
    calls = scripted_heads(monkeypatch, times)

    def target(codes: bool):
        model = tiny_target().model
        model.lm_head.packed = types.SimpleNamespace(kernel="stream", codes=codes)
        return model

    assert isinstance(screen_for(target(codes=False)), ScreenedHead)
    times[1] = 2.0
    assert screen_for(target(codes=True)) is None and calls == [SCREEN_REPS, SCREEN_REPS]
    assert isinstance(screen_for(target(codes=False)), ScreenedHead) and len(calls) == 2  # each kept apart


@pytest.mark.parametrize("native", NATIVE)
def test_flat_and_peaked_rows_in_one_call_pick_the_float32_argmax(native: bool) -> None:
    w = near_tie_weights()
    g = torch.Generator().manual_seed(5)
    w[100:140] = w[100] * (1 + 1e-4 * torch.randn(40, 1, generator=g))  # 40 tokens bfloat16 cannot tell apart
    # peaked rows (their candidates are among the best few) and rows along those 40 tokens, where more than
    # the best few are within the error bound of the best, so every token's reach is checked
    h = torch.cat([hidden_rows(6), w[100:101] * 40 + 0.01 * hidden_rows(4, seed=2)])
    scores = ScreenedHead(w, native=native).scores(h)
    assert scores.pick(0.0, None) == (h @ w.T).argmax(dim=1).tolist()
    values = scores.approx.topk(16, dim=1).values
    assert (values[6:, 0] - values[6:, -1] < scores.radius[6:] * scores.head.max_norm).all()  # the full check
    assert (values[:6, 0] - values[:6, -1] > 2 * scores.radius[:6] * scores.head.max_norm).sum() >= 3  # fast ones


@pytest.mark.skipif(not row_top.active(), reason="no C++ compiler here")
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_flat_rows_candidates_in_cpp_are_pytorchs_in_its_order(monkeypatch, temperature: float) -> None:
    """A flat row's search over the whole vocabulary (``row_reaching``) finds exactly the tokens, in the
    order, that PyTorch's passes find, so the pick cannot change with it; rows may come in any order."""
    w = near_tie_weights(vocab=1000)
    w[100:300] = w[100] * (1 + 1e-3 * torch.randn(200, 1, generator=torch.Generator().manual_seed(3)))
    h = torch.cat([w[100:101] * 30 + 0.05 * hidden_rows(5, seed=4), hidden_rows(3)])
    scores = ScreenedHead(w, native=False).scores(h)
    scale = 1.0 if temperature == 0 else 1 / temperature
    g = torch.Generator().manual_seed(6)
    noise = -torch.empty(8, 1000).exponential_(generator=g).log()  # Gumbel
    noisy = scores.approx if temperature == 0 else scores.approx * scale + noise
    flat = torch.tensor([4, 0, 2, 6])
    top = noisy.topk(16, dim=1).values[flat].float()
    floor, cut = top[:, 0] - 2.0, top[:, 0] - 4.0
    got = scores._reaching(noisy, flat, cut, floor, scale)
    monkeypatch.setattr(row_top, "native_rows", lambda _: False)
    want = scores._reaching(noisy, flat, cut, floor, scale)
    assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert set(got[0].tolist()) == {4, 0, 2, 6} and got[0].numel() > 40  # many tokens of every row reached


@pytest.mark.parametrize("native", [None, *NATIVE])
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_token_probabilities_of_some_rows_are_those_of_all_rows(native: bool | None, temperature: float) -> None:
    """A normaliser is computed only for the rows asked about (a tree's parents, not its leaves): the
    probabilities do not depend on which other rows are asked about, nor on repeats."""
    w, h = near_tie_weights(), hidden_rows(6, spread=2.0)
    scores = FullScores(h @ w.T) if native is None else ScreenedHead(w, native=native).scores(h)
    everyone = [row for row in range(6) for _ in range(2)]
    tokens = [7 * k for k in range(12)]
    every = scores.token_probs(everyone, tokens, temperature)
    some = [4, 1, 4]
    assert torch.equal(scores.token_probs(some, [tokens[8], tokens[2], tokens[9]], temperature), every[[8, 2, 9]])


@pytest.mark.parametrize("native", NATIVE)
@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_bfloat16_scores_kept_as_they_come_give_the_picks_and_probabilities_of_widened_ones(native, temperature):
    """Where the C++ reads bfloat16 rows the screen keeps its scores bfloat16 (no widened copy): the picks
    (flat rows included) and node probabilities are exactly those of the same scores widened first."""
    w = near_tie_weights()
    w[100:300] = w[100] * (1 + 1e-3 * torch.randn(200, 1, generator=torch.Generator().manual_seed(3)))
    h = torch.cat([w[100:101] * 30 + 0.05 * hidden_rows(5, seed=4), hidden_rows(60)])  # 5 flat rows
    kept = ScreenedHead(w, native=native).scores(h)
    if not row_top.native_rows(kept.approx):
        pytest.skip("no C++ here: the scores are widened as they come")
    assert kept.approx.dtype == torch.bfloat16
    widened = ScreenedScores(kept.head, kept.hidden, kept.approx.float(), kept.radius)
    noise = -torch.empty(65, w.shape[0]).exponential_(generator=torch.Generator().manual_seed(2)).log()
    picks = kept.pick(temperature, noise)
    assert picks == widened.pick(temperature, noise)
    rows, tokens = list(range(65)), picks
    assert torch.equal(kept.token_probs(rows, tokens, temperature), widened.token_probs(rows, tokens, temperature))
