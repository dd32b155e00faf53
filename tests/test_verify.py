"""Acceptance rules: greedy on hand-built trees, the sampling rule's residual step, and a statistical test
that tree sampling reproduces the target's joint distribution exactly (with negative controls showing
the test can fail)."""
from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import pytest
import torch

from talon.engine.builders import ChainBuilder, Eagle2Builder, StaticBuilder, TalonBuilder, TreeBuilder
from talon.tree import DraftTree
from talon.engine.verify import greedy_accept, sampling_accept
from talon.tree import ACCEPTED, NO_TOKEN, NOT_REACHED, REJECTED, ROOT, Verdict
from tests.toy import (Context, LogprobFn, MarkovTarget, TableDrafter, one_hot_fn, random_fn, table_fn,
                       toy_target_table)


# ---- greedy ------------------------------------------------------------------------------------------
def hand_tree() -> DraftTree:
    """root(9) -> a(1) [-> c(3) -> e(5), d(4)], b(2)."""
    t = DraftTree.with_root(9)
    a = t.add(0, 1, -0.1)   # 1
    t.add(0, 2, -2.0)       # 2
    c = t.add(a, 3, -0.5)   # 3
    t.add(a, 4, -1.0)       # 4
    t.add(c, 5, -0.2)       # 5
    return t


def logits_with_argmax(argmax: list[int], vocab: int = 10, seed: int = 0) -> torch.Tensor:
    """Random logits whose row-wise argmax is ``argmax`` (by a clear margin)."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(len(argmax), vocab, generator=g)
    logits[torch.arange(len(argmax)), torch.tensor(argmax)] = 10.0
    return logits


def test_greedy_accepts_along_target_argmax() -> None:
    tree = hand_tree()
    logits = logits_with_argmax([1, 4, 0, 0, 7, 0])
    v = greedy_accept(tree, logits)
    assert v.accepted_path == [0, 1, 4]
    assert v.accepted_tokens == 2
    assert v.bonus_token == 7
    assert v.status == [ROOT, ACCEPTED, REJECTED, REJECTED, ACCEPTED, NOT_REACHED]
    assert v.target_token == [1, 4, NO_TOKEN, NO_TOKEN, 7, NO_TOKEN]
    probs = torch.softmax(logits, -1)
    expected = [1.0] + [float(probs[tree.parent[i], tree.token[i]]) for i in range(1, len(tree))]
    assert v.target_prob == pytest.approx(expected, rel=1e-6)


def test_greedy_deepest_leaf_bonus_from_leaf_row() -> None:
    tree = hand_tree()
    v = greedy_accept(tree, logits_with_argmax([1, 3, 0, 5, 0, 8]))
    assert v.accepted_path == [0, 1, 3, 5]
    assert v.bonus_token == 8
    assert v.status == [ROOT, ACCEPTED, REJECTED, ACCEPTED, REJECTED, ACCEPTED]
    assert v.target_token == [1, 3, NO_TOKEN, 5, NO_TOKEN, 8]


def test_greedy_rejects_everything_at_root() -> None:
    tree = hand_tree()
    v = greedy_accept(tree, logits_with_argmax([6, 3, 0, 5, 0, 8]))
    assert v.accepted_path == [0] and v.accepted_tokens == 0
    assert v.bonus_token == 6
    assert v.status == [ROOT, REJECTED, REJECTED, NOT_REACHED, NOT_REACHED, NOT_REACHED]
    assert v.target_token == [6] + [NO_TOKEN] * 5


def test_greedy_root_only_and_duplicate_siblings() -> None:
    v = greedy_accept(DraftTree.with_root(4), logits_with_argmax([2]))
    assert (v.accepted_path, v.bonus_token, v.status, v.target_prob) == ([0], 2, [ROOT], [1.0])
    t = DraftTree.with_root(0)
    t.add(0, 3, -1.0)
    t.add(0, 3, -1.0)     # a duplicate sibling: only the first can be accepted
    v = greedy_accept(t, logits_with_argmax([3, 1, 2]))
    assert v.accepted_path == [0, 1] and v.bonus_token == 1
    assert v.status == [ROOT, ACCEPTED, REJECTED]


def test_greedy_equals_plain_greedy_decoding_on_random_trees() -> None:
    """Losslessness: with a deterministic target, path + bonus = the target's own greedy continuation."""
    vocab = 7
    target = MarkovTarget(toy_target_table(vocab, seed=5))
    for seed in range(30):
        prefix: Context = (seed % vocab,)
        root = (seed * 3) % vocab
        drafter = TableDrafter(vocab, random_fn(vocab, seed))
        drafter.reset(prefix + (root,))
        tree = TalonBuilder(12, 3, 0.05).build(drafter, root).tree
        logits = torch.log(target.tree_probs(tree, prefix)).float()
        v = greedy_accept(tree, logits)
        out = [tree.token[i] for i in v.accepted_path[1:]] + [v.bonus_token]
        ctx = prefix + (root,)
        plain = []
        for _ in out:
            plain.append(int(target.next_probs(ctx).argmax()))
            ctx += (plain[-1],)
        assert out == plain


# ---- the sampling rule's single steps ----------------------------------------------------------------
class ScriptedRandom:
    """Replaces ``torch.rand`` / ``torch.multinomial`` with scripted draws and records what multinomial saw."""

    def __init__(self, uniforms: list[float], pick: int) -> None:
        self.uniforms = list(uniforms)
        self.pick = pick
        self.residuals: list[torch.Tensor] = []

    def rand(self, *args, **kwargs) -> torch.Tensor:
        return torch.tensor(self.uniforms.pop(0), dtype=torch.float64)

    def multinomial(self, p: torch.Tensor, n: int, **kwargs) -> torch.Tensor:
        self.residuals.append(p.clone())
        return torch.tensor([self.pick])


def one_level_tree(children: list[int]) -> DraftTree:
    t = DraftTree.with_root(0)
    for x in children:
        t.add(0, x, -1.0)
    return t


P_ROOT = torch.tensor([0.1, 0.5, 0.3, 0.05, 0.05], dtype=torch.float64)


def run_scripted(monkeypatch: pytest.MonkeyPatch, children: list[int], uniforms: list[float],
                 pick: int = 0) -> tuple[Verdict, ScriptedRandom]:
    script = ScriptedRandom(uniforms, pick)
    monkeypatch.setattr(torch, "rand", script.rand)
    monkeypatch.setattr(torch, "multinomial", script.multinomial)
    tree = one_level_tree(children)
    probs = torch.stack([P_ROOT] + [torch.full((5,), 0.2, dtype=torch.float64)] * len(children))
    v = sampling_accept(tree, probs, torch.Generator())
    assert not script.uniforms, "sampling_accept drew a different number of uniforms than expected"
    return v, script


def test_sampling_residual_after_all_children_rejected(monkeypatch: pytest.MonkeyPatch) -> None:
    """Children 1 (p=.5) and 2 (p=.3/.5=.6 after renormalising) both refused: the bonus is drawn from
    p with both zeroed and renormalised: [.1, 0, 0, .05, .05] / .2."""
    v, script = run_scripted(monkeypatch, [1, 2], [0.51, 0.61], pick=4)
    assert len(script.residuals) == 1
    torch.testing.assert_close(script.residuals[0].double(),
                               torch.tensor([0.5, 0.0, 0.0, 0.25, 0.25], dtype=torch.float64))
    assert v.accepted_path == [0] and v.bonus_token == 4
    assert v.status == [ROOT, REJECTED, REJECTED]
    assert v.target_token == [4, NO_TOKEN, NO_TOKEN]
    assert v.target_prob == pytest.approx([1.0, 0.5, 0.3])


def test_sampling_second_child_uses_renormalised_probability(monkeypatch: pytest.MonkeyPatch) -> None:
    """After child 1 (p=.5) is refused, child 2 is accepted with probability .3 / .5 = .6, not .3."""
    v, _ = run_scripted(monkeypatch, [1, 2], [0.51, 0.59], pick=0)   # .59 <= .6: accepted at a leaf
    # At the accepted leaf (row = uniform .2, no children) the bonus comes from multinomial.
    assert v.accepted_path == [0, 2]
    assert v.status == [ROOT, REJECTED, ACCEPTED]
    assert v.target_token == [2, NO_TOKEN, 0]


def test_sampling_first_child_accepted_skips_siblings(monkeypatch: pytest.MonkeyPatch) -> None:
    v, script = run_scripted(monkeypatch, [1, 2], [0.49], pick=3)
    assert v.accepted_path == [0, 1] and v.bonus_token == 3
    assert v.status == [ROOT, ACCEPTED, NOT_REACHED]    # never tested, so not "rejected"
    torch.testing.assert_close(script.residuals[0].double(), torch.full((5,), 0.2, dtype=torch.float64))


def test_sampling_zero_probability_child_then_residual(monkeypatch: pytest.MonkeyPatch) -> None:
    """A draft the target gives probability 0 is refused even at a tiny uniform; the residual is then p."""
    tree = one_level_tree([2])
    probs = torch.tensor([[0.5, 0.5, 0.0], [1 / 3] * 3], dtype=torch.float64)
    script = ScriptedRandom([1e-9], pick=0)
    monkeypatch.setattr(torch, "rand", script.rand)
    monkeypatch.setattr(torch, "multinomial", script.multinomial)
    v = sampling_accept(tree, probs, torch.Generator())
    assert v.accepted_path == [0] and v.status == [ROOT, REJECTED] and v.bonus_token == 0
    torch.testing.assert_close(script.residuals[0].double(), torch.tensor([0.5, 0.5, 0.0], dtype=torch.float64))


def test_sampling_one_step_distribution() -> None:
    """Unscripted: over many draws, the token emitted after the root (accepted child or bonus) follows p,
    and given that every child was refused the bonus follows the residual p(y) / p(not children)."""
    tree = one_level_tree([1, 2])
    leaf = torch.full((5,), 0.2, dtype=torch.float64)
    probs = torch.stack([P_ROOT, leaf, leaf]).float()
    g = torch.Generator().manual_seed(123)
    n = 20_000
    first = torch.zeros(5)
    residual = torch.zeros(5)
    for _ in range(n):
        v = sampling_accept(tree, probs, g)
        tok = tree.token[v.accepted_path[1]] if len(v.accepted_path) > 1 else v.bonus_token
        first[tok] += 1
        if len(v.accepted_path) == 1:
            residual[v.bonus_token] += 1
    # 5 sigma per cell: sigma <= sqrt(.25 / n).
    assert (first / n - P_ROOT.float()).abs().max() < 5 * math.sqrt(0.25 / n)
    assert residual[1] == residual[2] == 0
    m = residual.sum()
    assert (residual / m - torch.tensor([0.5, 0, 0, 0.25, 0.25])).abs().max() < 5 * math.sqrt(0.25 / m)


# ---- sampling correctness: empirical joint vs the exact target joint -----------------------------------
VOCAB = 4
LENGTH = 3
PROMPT: Context = (0, 1)
TARGET = MarkovTarget(toy_target_table(VOCAB, seed=1))
EXACT = TARGET.joint(PROMPT, LENGTH)
ALPHA = 1e-6
"""Probability that a correct sampler exceeds ``tv_bound`` (the seeds are fixed, so the outcome is
deterministic; ALPHA says how unlucky a seed would have to be)."""
CHI2_P_MIN = 1e-4
"""The chi-square test fails below this p-value (probability 1e-4 for a correct sampler and a random seed)."""

Accept = Callable[[DraftTree, torch.Tensor, torch.Generator], Verdict]


def tv_bound(exact: torch.Tensor, n: int, alpha: float = ALPHA) -> float:
    """A bound that the TV distance between the empirical joint of ``n`` i.i.d. samples and ``exact``
    exceeds with probability <= ``alpha``:

    * mean: E|p^_i - p_i| <= sqrt(p_i (1 - p_i) / n) (Jensen), so E[TV] <= 1/2 sum_i sqrt(p_i (1 - p_i) / n);
    * deviation: TV changes by at most 1/n when one sample changes, so by McDiarmid
      P(TV >= E[TV] + t) <= exp(-2 n t^2); t = sqrt(ln(1/alpha) / (2 n))."""
    p = exact.flatten()
    mean = 0.5 * float(torch.sqrt(p * (1 - p) / n).sum())
    return mean + math.sqrt(math.log(1 / alpha) / (2 * n))


def chi_square_pvalue(counts: torch.Tensor, exact: torch.Tensor) -> float:
    """Pearson chi-square goodness of fit over the cells with positive exact probability."""
    n = float(counts.sum())
    mask = exact > 0
    expected = exact[mask] * n
    stat = float(((counts[mask] - expected) ** 2 / expected).sum())
    df = int(mask.sum()) - 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


def sample_joint(builder: TreeBuilder, drafter_fn: LogprobFn, n: int, seed: int,
                 accept: Accept = sampling_accept) -> torch.Tensor:
    """``n`` generations of ``LENGTH`` tokens after ``PROMPT`` by tree speculative sampling: per step build
    the tree from the drafter on the current context, take the target's per-node distributions, accept,
    commit the accepted path + bonus.  Returns counts of the first ``LENGTH`` tokens.

    The tree and the target rows are a deterministic function of the context, so they are built once per
    context and reused (exactly what rebuilding would give, far cheaper)."""
    g = torch.Generator().manual_seed(seed)
    cache: dict[Context, tuple[DraftTree, torch.Tensor]] = {}
    seen: Counter[tuple[int, ...]] = Counter()
    for _ in range(n):
        ctx = PROMPT
        out: list[int] = []
        while len(out) < LENGTH:
            if ctx not in cache:
                drafter = TableDrafter(VOCAB, drafter_fn)
                drafter.reset(ctx)
                tree = builder.build(drafter, ctx[-1]).tree
                cache[ctx] = (tree, TARGET.tree_probs(tree, ctx[:-1]).float())
            tree, probs = cache[ctx]
            v = accept(tree, probs, g)
            new = tuple(tree.token[i] for i in v.accepted_path[1:]) + (v.bonus_token,)
            out.extend(new)
            ctx = ctx + new
        seen[tuple(out[:LENGTH])] += 1
    counts = torch.zeros((VOCAB,) * LENGTH, dtype=torch.float64)
    for cell, c in seen.items():
        counts[cell] = c
    return counts


def distribution_check(counts: torch.Tensor) -> tuple[bool, float, float, float]:
    """(passes, tv, tv bound, chi-square p-value) of the empirical joint against ``EXACT``."""
    n = int(counts.sum())
    tv = 0.5 * float((counts / n - EXACT).abs().sum())
    bound = tv_bound(EXACT, n)
    p = chi_square_pvalue(counts, EXACT)
    impossible = float(counts[EXACT == 0].sum())
    return tv < bound and p > CHI2_P_MIN and impossible == 0, tv, bound, p


# Drafters over the toy vocabulary (each a deterministic function of the context).
P2 = TARGET.P.float()
DRAFTERS: dict[str, LogprobFn] = {
    "identical": table_fn(P2),                                   # q == p exactly
    "adversarial": table_fn((1 - P2) ** 6 / ((1 - P2) ** 6).sum(-1, keepdim=True)),  # likes what p dislikes
    "one-hot-wrong": one_hot_fn(VOCAB, 0.0, pick=lambda c: int(TARGET.next_probs(c).argmin())),
    "mismatched": random_fn(VOCAB, 7, scale=(1.0, 3.0)),         # unrelated, higher-order
}
BUILDERS: dict[str, Callable[[], TreeBuilder]] = {
    "talon": lambda: TalonBuilder(8, 2, 0.1),
    "chain": lambda: ChainBuilder(3),
}
FAST_N = 20_000
SLOW_N = 120_000


def test_toy_target_has_structural_zeros_and_draft_hits_them() -> None:
    """Sanity of the setup: some joint cells are impossible and the one-hot-wrong drafter proposes an
    impossible token (p = 0) at least in some contexts, so the p(x) = 0 path is exercised."""
    assert (EXACT == 0).any() and (EXACT > 0).sum() > 40
    assert float(EXACT.sum()) == pytest.approx(1.0)
    assert TARGET.next_probs((0, 2))[3] == 0
    assert int(DRAFTERS["one-hot-wrong"]((0, 2)).argmax()) == 3


@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("drafter", ["identical", "adversarial", "one-hot-wrong"])
def test_sampling_preserves_target_joint(builder: str, drafter: str) -> None:
    seed = 2024 + 10 * list(BUILDERS).index(builder) + list(DRAFTERS).index(drafter)
    counts = sample_joint(BUILDERS[builder](), DRAFTERS[drafter], FAST_N, seed=seed)
    ok, tv, bound, p = distribution_check(counts)
    assert ok, f"TV {tv:.4f} (bound {bound:.4f}), chi-square p = {p:.2e}, impossible = {counts[EXACT == 0].sum()}"


def accept_first_child(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> Verdict:
    """WRONG on purpose: always descend into the first child, then draw the bonus from p."""
    node, path = 0, [0]
    while tree.children(node):
        node = tree.children(node)[0]
        path.append(node)
    bonus = int(torch.multinomial(probs[node].double(), 1, generator=generator))
    return Verdict([], path, bonus, [], [])


def accept_without_renormalising(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> Verdict:
    """WRONG on purpose, subtly: EAGLE's rule but p is not renormalised after a refusal, so a later
    sibling x is accepted with probability p(x) instead of p(x) / (1 - p(refused))."""
    path = [0]
    while True:
        p = probs[path[-1]].double().clone()
        nxt = None
        for child in tree.children(path[-1]):
            if torch.rand((), generator=generator, dtype=torch.float64) <= p[tree.token[child]]:
                nxt = child
                break
            p[tree.token[child]] = 0.0
        if nxt is None:
            if p.sum() == 0:                       # every token refused: fall back to the row itself
                p = probs[path[-1]].double()
            return Verdict([], path, int(torch.multinomial(p, 1, generator=generator)), [], [])
        path.append(nxt)


def accept_bonus_from_full_p(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> Verdict:
    """WRONG on purpose, classic: EAGLE's acceptance, but the bonus after refusals is drawn from the full p
    instead of the residual, so a refused token can come back as the bonus."""
    path = [0]
    while True:
        p = probs[path[-1]].double()
        q = p.clone()
        nxt = None
        for child in tree.children(path[-1]):
            x = tree.token[child]
            if torch.rand((), generator=generator, dtype=torch.float64) <= q[x] / q.sum():
                nxt = child
                break
            q[x] = 0.0
        if nxt is None:
            return Verdict([], path, int(torch.multinomial(p, 1, generator=generator)), [], [])
        path.append(nxt)


@pytest.mark.parametrize("wrong", [accept_first_child, accept_without_renormalising, accept_bonus_from_full_p])
def test_negative_control_wrong_rules_fail_the_check(wrong: Accept) -> None:
    """The same harness, sample size and thresholds reject a broken acceptance rule."""
    counts = sample_joint(BUILDERS["talon"](), DRAFTERS["identical"], FAST_N, seed=2024, accept=wrong)
    ok, tv, bound, p = distribution_check(counts)
    assert not ok
    assert p < CHI2_P_MIN
    if wrong is accept_first_child:
        assert tv > 2 * bound


@pytest.mark.slow
@pytest.mark.parametrize("builder", ["talon", "chain", "eagle2", "static"])
@pytest.mark.parametrize("drafter", list(DRAFTERS))
def test_sampling_preserves_target_joint_large(builder: str, drafter: str) -> None:
    """The same check with 1.2e5 generations per case (tighter TV bound), a fourth drafter and two more
    builders."""
    make = {**BUILDERS, "eagle2": lambda: Eagle2Builder(8, 3, 3),
            "static": lambda: StaticBuilder(((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0)))}[builder]
    counts = sample_joint(make(), DRAFTERS[drafter], SLOW_N, seed=7)
    ok, tv, bound, p = distribution_check(counts)
    assert ok, f"TV {tv:.4f} (bound {bound:.4f}), chi-square p = {p:.2e}"
