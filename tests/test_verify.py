"""Acceptance rules: greedy on hand-built trees, the sampling rule (greedy on Gumbel-perturbed scores) and
its one-step law, and a statistical test that tree sampling with the run's position-keyed noise
reproduces the target's joint distribution exactly (with negative controls showing the test can fail)."""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Callable

import pytest
import torch

from talon.engine.builders import ChainBuilder, Eagle2Builder, StaticBuilder, TalonBuilder, TreeBuilder
from talon.engine.sampling import PositionNoise, gumbel
from talon.engine.verify import greedy_accept, sampling_accept, walk
from talon.models.lm_head import FullScores
from talon.tree import ACCEPTED, NO_TOKEN, NOT_REACHED, REJECTED, ROOT, DraftTree, Verdict
from tests.toy import Context, LogprobFn, MarkovTarget, TableDrafter, one_hot_fn, random_fn, table_fn, toy_target_table


# ---- greedy ------------------------------------------------------------------------------------------
def hand_tree() -> DraftTree:
    """root(9) -> a(1) [-> c(3) -> e(5), d(4)], b(2)."""
    t = DraftTree.with_root(9)
    a = t.add(0, 1, -0.1)  # 1
    t.add(0, 2, -2.0)  # 2
    c = t.add(a, 3, -0.5)  # 3
    t.add(a, 4, -1.0)  # 4
    t.add(c, 5, -0.2)  # 5
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
    t.add(0, 3, -1.0)  # a duplicate sibling: only the first can be accepted
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
        tree = TalonBuilder(12, 3, 0.05).build(drafter, prefix + (root,)).tree
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
def one_level_tree(children: list[int]) -> DraftTree:
    t = DraftTree.with_root(0)
    for x in children:
        t.add(0, x, -1.0)
    return t


P_ROOT = torch.tensor([0.1, 0.5, 0.3, 0.05, 0.05], dtype=torch.float64)


def noise_rows(generator: torch.Generator, depth: int, vocab: int) -> torch.Tensor:
    """Fresh Gumbel rows ``[depth + 1, vocab]`` (one per tree depth)."""
    return gumbel(torch.rand(depth + 1, vocab, generator=generator, dtype=torch.float64)).float()


def test_sampling_walk_is_the_greedy_walk_on_perturbed_scores() -> None:
    """At node i the target's token is argmax(logits[i] / T + noise[depth i]); the walk is greedy's."""
    tree = hand_tree()
    g = torch.Generator().manual_seed(3)
    logits = torch.randn(len(tree), 10, generator=g)
    for _ in range(20):
        noise = noise_rows(g, tree.max_depth, 10)
        v = sampling_accept(tree, logits, 0.7, noise)
        perturbed = logits / 0.7 + noise[torch.tensor(tree.depth)]
        w = greedy_accept(tree, perturbed)
        assert (v.status, v.accepted_path, v.bonus_token, v.target_token) == (
            w.status,
            w.accepted_path,
            w.bonus_token,
            w.target_token,
        )
        tempered = torch.softmax(logits / 0.7, -1)
        expected = [1.0] + [float(tempered[tree.parent[i], tree.token[i]]) for i in range(1, len(tree))]
        assert v.target_prob == pytest.approx(expected, rel=1e-5)


def test_sampling_never_accepts_a_zero_probability_child() -> None:
    tree = one_level_tree([2])
    logits = torch.log(torch.tensor([[0.5, 0.5, 0.0], [1 / 3] * 3]))
    g = torch.Generator().manual_seed(0)
    for _ in range(200):
        v = sampling_accept(tree, logits, 1.0, noise_rows(g, 1, 3))
        assert v.accepted_path == [0] and v.status == [ROOT, REJECTED] and v.bonus_token in (0, 1)


@pytest.mark.slow  # seconds each: CI's second stage
def test_sampling_one_step_distribution() -> None:
    """Over many draws, the token emitted after the root (accepted child or bonus) follows p, each child
    is accepted with probability p(child), and given that every child was refused the bonus follows
    the residual p(y) / p(not children): the law of EAGLE's sequential rule."""
    tree = one_level_tree([1, 2])
    leaf = torch.full((5,), 0.2, dtype=torch.float64)
    logits = torch.log(torch.stack([P_ROOT, leaf, leaf])).float()
    g = torch.Generator().manual_seed(123)
    n = 20_000
    first = torch.zeros(5)
    residual = torch.zeros(5)
    for _ in range(n):
        v = sampling_accept(tree, logits, 1.0, noise_rows(g, 1, 5))
        tok = tree.token[v.accepted_path[1]] if len(v.accepted_path) > 1 else v.bonus_token
        first[tok] += 1
        if len(v.accepted_path) == 1:
            residual[v.bonus_token] += 1
    # 5 sigma per cell: sigma <= sqrt(.25 / n).
    assert (first / n - P_ROOT.float()).abs().max() < 5 * math.sqrt(0.25 / n)
    assert residual[1] == residual[2] == 0
    m = residual.sum()
    assert (residual / m - torch.tensor([0.5, 0, 0, 0.25, 0.25])).abs().max() < 5 * math.sqrt(0.25 / m)


def test_position_noise_is_keyed_by_seed_and_position() -> None:
    a, b = PositionNoise(1, 50, torch.device("cpu")), PositionNoise(1, 50, torch.device("cpu"))
    assert torch.equal(a.rows([7, 3]), b.rows([7, 3]))  # same seed, same rows
    assert not torch.equal(a.row(7), a.row(8))  # positions differ
    assert not torch.equal(a.row(7), PositionNoise(2, 50, torch.device("cpu")).row(7))  # seeds differ
    a.forget_before(8)
    assert torch.equal(a.row(7), b.row(7))  # drawn again, the same


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


def position_keyed_accept(tree: DraftTree, logits: torch.Tensor, noise: PositionNoise, root_position: int) -> Verdict:
    """The verifier's rule (``Verifier.verify`` over every node's row): the target's token at each node
    picked from its scores with the run's noise of the node's output position, then the walk.  The
    target's probabilities of the drafted tokens, which the walk does not read, are left out (``[]``):
    ``sampling_accept`` computes them, and the checks above test them."""
    noise_rows = noise.rows([root_position + d for d in tree.depth])
    choices = FullScores(logits).pick(1.0, noise_rows)
    status, path, bonus, target_token = walk(tree, choices.__getitem__)
    return Verdict(status, path, bonus, target_token, [])


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
    return float(
        torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64), torch.tensor(stat / 2, dtype=torch.float64))
    )


def sample_joint(
    builder: TreeBuilder, drafter_fn: LogprobFn, n: int, seed: int, accept: Accept | None = None
) -> torch.Tensor:
    """``n`` generations of ``LENGTH`` tokens after ``PROMPT`` by tree speculative sampling: per step build
    the tree from the drafter on the current context, take the target's per-node distributions, accept,
    commit the accepted path + bonus.  Returns counts of the first ``LENGTH`` tokens.  Without
    ``accept``, the production rule with ``PositionNoise`` (generation k of the run uses seed
    ``seed + k``), else ``accept(tree, probs, generator)``.

    The tree and the target rows are a deterministic function of the context, so they are built once per
    context and reused (exactly what rebuilding would give, far cheaper)."""
    g = torch.Generator().manual_seed(seed)
    cache: dict[Context, tuple[DraftTree, torch.Tensor, torch.Tensor]] = {}  # tree, probs, logits
    seen: Counter[tuple[int, ...]] = Counter()
    for k in range(n):
        noise = PositionNoise(seed * 1_000_003 + k, VOCAB, torch.device("cpu"))
        ctx = PROMPT
        out: list[int] = []
        while len(out) < LENGTH:
            if ctx not in cache:
                drafter = TableDrafter(VOCAB, drafter_fn)
                tree = builder.build(drafter, ctx).tree
                probs = TARGET.tree_probs(tree, ctx[:-1]).float()
                cache[ctx] = (tree, probs, torch.log(probs))
            tree, probs, logits = cache[ctx]
            if accept is None:
                v = position_keyed_accept(tree, logits, noise, len(ctx) - 1)
            else:
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
    "identical": table_fn(P2),  # q == p exactly
    "adversarial": table_fn((1 - P2) ** 6 / ((1 - P2) ** 6).sum(-1, keepdim=True)),  # likes what p dislikes
    "one-hot-wrong": one_hot_fn(VOCAB, 0.0, pick=lambda c: int(TARGET.next_probs(c).argmin())),
    "mismatched": random_fn(VOCAB, 7, scale=(1.0, 3.0)),  # unrelated, higher-order
}
BUILDERS: dict[str, Callable[[], TreeBuilder]] = {
    "talon": lambda: TalonBuilder(8, 2, 0.1),
    "chain": lambda: ChainBuilder(3),
    "eagle2": lambda: Eagle2Builder(8, 3, 3),
    "static": lambda: StaticBuilder(((0,), (1,), (0, 0), (0, 1), (1, 0), (0, 0, 0))),
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


@pytest.mark.slow  # seconds each: CI's second stage
@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("drafter", list(DRAFTERS))
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
            if p.sum() == 0:  # every token refused: fall back to the row itself
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


@pytest.mark.slow  # seconds each: CI's second stage
@pytest.mark.parametrize("wrong", [accept_first_child, accept_without_renormalising, accept_bonus_from_full_p])
def test_negative_control_wrong_rules_fail_the_check(wrong: Accept) -> None:
    """The same harness, sample size and thresholds reject a broken acceptance rule."""
    counts = sample_joint(BUILDERS["talon"](), DRAFTERS["identical"], FAST_N, seed=2024, accept=wrong)
    ok, tv, bound, p = distribution_check(counts)
    assert not ok
    assert p < CHI2_P_MIN
    if wrong is accept_first_child:
        assert tv > 2 * bound


@pytest.mark.thorough
@pytest.mark.parametrize("builder", list(BUILDERS))
@pytest.mark.parametrize("drafter", list(DRAFTERS))
def test_sampling_preserves_target_joint_large(builder: str, drafter: str) -> None:
    """The same check with 1.2e5 generations per case (a TV bound 2.4x tighter); about 1.5 min a case,
    so CI leaves it to ``-m thorough``."""
    counts = sample_joint(BUILDERS[builder](), DRAFTERS[drafter], SLOW_N, seed=7)
    ok, tv, bound, p = distribution_check(counts)
    assert ok, f"TV {tv:.4f} (bound {bound:.4f}), chi-square p = {p:.2e}"
