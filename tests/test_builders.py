"""Tree builders driven by model-free table drafters: budgets, shapes, the TALON gate, EAGLE-2's re-rank,
and full-vocabulary reference implementations that share no code with ``talon.engine.builders``."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable

import numpy as np
import pytest
import torch

from talon.config import STATIC_MAX_CHILDREN, ConfigError, TreeConfig, static_capacity
from talon.engine.builders import (
    DEFAULT_STATIC_RANK_PRIOR,
    ChainBuilder,
    Eagle2Builder,
    RootOnlyBuilder,
    StaticBuilder,
    TalonBuilder,
    TreeBuilder,
    default_static_paths,
    make_builder,
)
from talon.tree import ADMITTED, BELOW_GATE, BEYOND_K, SOURCE_MODEL, DraftTree
from tests.toy import (
    Context,
    LogprobFn,
    TableDrafter,
    node_path,
    node_tokens,
    one_hot_fn,
    random_fn,
    sparse_random_fn,
    uniform_fn,
)

TOL = 1e-5
"""Float tolerance for gate / ranking comparisons: the builder scores in float32 (about 2e-6 absolute
error at path log-probabilities near -20), the references here in float64."""

ROOT = 3


def build(builder: TreeBuilder, fn: LogprobFn, vocab: int, root: int = ROOT) -> tuple[DraftTree, int, TableDrafter]:
    drafter = TableDrafter(vocab, fn)
    result = builder.build(drafter, [root])
    return result.tree, result.drafter_forwards, drafter


def row(fn: LogprobFn, context: Context) -> np.ndarray:
    """The drafter's log-probabilities for ``context`` as float64."""
    return fn(context).double().numpy()


def check_common(tree: DraftTree, fn: LogprobFn, forwards: int, drafter: TableDrafter, root: int = ROOT) -> None:
    """Properties every builder's tree must have."""
    tree.validate()  # parents before children, depths consistent
    assert tree.token[0] == root
    assert forwards == len(drafter.calls)  # one propose call = one counted forward
    for node in range(1, len(tree)):
        assert math.isfinite(tree.draft_logprob[node]), "a -inf token was admitted"
        ctx = node_tokens(tree, tree.parent[node])
        assert tree.draft_logprob[node] == pytest.approx(row(fn, ctx)[tree.token[node]], abs=1e-6)
        path = node_path(tree, node)
        assert tree.path_logprob[node] == pytest.approx(sum(tree.draft_logprob[i] for i in path), abs=1e-9)
        assert tree.source[node] == SOURCE_MODEL
    for node in range(len(tree)):
        kids = [tree.token[c] for c in tree.children(node)]
        assert len(kids) == len(set(kids)), f"duplicate sibling tokens under node {node}"


# ---- reference implementations (full vocabulary, no shortcuts) ---------------------------------------
def reference_talon(fn: LogprobFn, vocab: int, root: int, budget: int, k: int, mu: float) -> DraftTree:
    """Algorithm 2 of the TALON paper over the FULL vocabulary: each layer considers every (parent, token)
    pair, gates on ``p >= mu * max p``, then keeps the best ``budget - drafts`` if that overflows.
    ``k = 0``: no Top-K root layer, the root's children are gated too.
    Scores in float64; within a layer nodes are added best first (ties: parent order, then token id)."""
    tree = DraftTree.with_root(root)
    r = row(fn, (root,))
    order = sorted((t for t in range(vocab) if np.isfinite(r[t])), key=lambda t: (-r[t], t))
    layer = [tree.add(0, t, float(np.float32(r[t]))) for t in order[: min(k, budget)]] if k else [0]
    while layer and tree.num_drafts < budget:
        rows = np.stack([row(fn, node_tokens(tree, p)) for p in layer])  # [parents, vocab]
        scores = np.array([tree.path_logprob[p] for p in layer])[:, None] + rows  # full pool S
        finite = np.isfinite(scores)
        if not finite.any():
            break
        m = scores[finite].max()
        pi, ti = np.nonzero(finite & (scores >= math.log(mu) + m))
        picked = sorted(zip(pi.tolist(), ti.tolist()), key=lambda c: (-scores[c], c[0], c[1]))
        picked = picked[: budget - tree.num_drafts]
        layer = [tree.add(layer[p], t, float(np.float32(rows[p, t]))) for p, t in picked]
    return tree


def reference_eagle2(fn: LogprobFn, vocab: int, root: int, budget: int, k: int, depth: int) -> dict[Context, float]:
    """EAGLE-2 (``cnets.py::topK_genrate``) over the full vocabulary: root top-k; ``depth - 1`` times expand
    the frontier (top-k children each), record every candidate, next frontier = global top-k; finally the
    top-``budget`` recorded candidates.  Returns {token path below the root: path log-prob}."""

    def top(ctx: Context) -> list[tuple[int, float]]:
        r = row(fn, ctx)
        ts = sorted((t for t in range(vocab) if np.isfinite(r[t])), key=lambda t: (-r[t], t))[:k]
        return [(t, float(r[t])) for t in ts]

    recorded: dict[Context, float] = {(t,): lp for t, lp in top((root,))}
    frontier = list(recorded)
    for _ in range(depth - 1):
        cands = {path + (t,): recorded[path] + lp for path in frontier for t, lp in top((root,) + path)}
        recorded.update(cands)
        frontier = sorted(cands, key=lambda c: -cands[c])[:k]
    kept = sorted(recorded, key=lambda c: -recorded[c])[:budget]
    return {c: recorded[c] for c in kept}


def paths_below_root(tree: DraftTree) -> dict[Context, float]:
    """{token path below the root: path log-prob} for every draft node."""
    return {node_tokens(tree, i)[1:]: tree.path_logprob[i] for i in range(1, len(tree))}


# ---- the TALON gate, checked from the finished tree ---------------------------------------------------
def check_talon_gate(tree: DraftTree, fn: LogprobFn, vocab: int, budget: int, k: int, mu: float) -> None:
    """Layer by layer, recompute the full candidate pool of Algorithm 2 from ``fn`` and check that the
    admitted layer is exactly a gated Top-R of it (up to ``TOL``)."""
    widths = tree.layer_widths()
    r = row(fn, (tree.token[0],))
    root_kids = tree.children(0)
    assert len(root_kids) == min(k, budget, int(np.isfinite(r).sum()))
    admitted = {tree.token[c] for c in root_kids}
    if root_kids:
        worst_in = min(r[t] for t in admitted)
        best_out = max((r[t] for t in range(vocab) if t not in admitted), default=-math.inf)
        assert best_out <= worst_in + TOL, "root layer is not the drafter's top-K"
    drafts = len(root_kids)
    for d in range(2, len(widths)):
        parents = [i for i in range(len(tree)) if tree.depth[i] == d - 1]
        layer = [i for i in range(len(tree)) if tree.depth[i] == d]
        pool = {
            (p, t): tree.path_logprob[p] + lp
            for p in parents
            for t, lp in enumerate(row(fn, node_tokens(tree, p)))
            if np.isfinite(lp)
        }
        m = max(pool.values())
        threshold = math.log(mu) + m
        chosen = {(tree.parent[i], tree.token[i]) for i in layer}
        assert chosen <= set(pool)
        for i in layer:  # every admitted node passes the gate p >= mu * m_d
            assert tree.path_logprob[i] >= threshold - TOL, f"node {i} at depth {d} is below the gate"
        worst_in = min(pool[c] for c in chosen)
        above = [s for c, s in pool.items() if c not in chosen and s >= threshold + TOL]
        assert max(above, default=-math.inf) <= worst_in + TOL, "an excluded candidate beats an admitted one"
        room = budget - drafts
        strict = sum(s >= threshold + TOL for s in pool.values())
        loose = sum(s >= threshold - TOL for s in pool.values())
        assert min(room, strict) <= len(layer) <= min(room, loose)
        drafts += len(layer)
    assert drafts == tree.num_drafts


TALON_CASES = [  # (vocab, budget, K, mu, tag)
    (50, 60, 10, 0.03, 0),
    (50, 60, 10, 0.03, 1),
    (200, 60, 10, 0.03, 2),
    (120, 32, 10, 0.01, 3),
    (80, 96, 10, 0.03, 4),
    (60, 20, 4, 0.1, 5),
    (60, 40, 1, 0.3, 6),
    (30, 60, 10, 0.001, 7),
    (100, 60, 10, 0.5, 8),
    (150, 48, 6, 0.05, 9),
    (10, 30, 3, 0.02, 10),
    (200, 64, 16, 0.2, 11),
]


# ---- TALON ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize("vocab,budget,k,mu,tag", TALON_CASES)
def test_talon_budget_root_layer_and_gate(vocab: int, budget: int, k: int, mu: float, tag: int) -> None:
    """Full-support drafter: exactly N drafts, min(K, N) root children, the gate and Top-R property on
    every later layer, one forward per layer."""
    fn = random_fn(vocab, tag)
    tree, forwards, drafter = build(TalonBuilder(budget, k, mu), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert tree.num_drafts == budget
    assert len(tree.children(0)) == min(k, budget)
    assert forwards == tree.max_depth == len(tree.layer_widths()) - 1
    check_talon_gate(tree, fn, vocab, budget, k, mu)
    # Each layer is grown from exactly the previous layer (prune-while-expanding: every admitted node
    # of layer d is a parent candidate of layer d + 1).
    for d, call in enumerate(drafter.calls[1:], start=1):
        assert call.frontier == [i for i in range(len(tree)) if tree.depth[i] == d]


@pytest.mark.parametrize("seed", range(100))
def test_talon_matches_full_vocabulary_reference(seed: int) -> None:
    """The per-parent top-R shortcut gives the same tree as Algorithm 2 over the full vocabulary.
    (The parameter mix gives depths from 1 to ~95: wide shallow trees, chains, and everything between.)"""
    rng = np.random.default_rng(seed)
    vocab = int(rng.integers(50, 201))
    budget = int(rng.choice([8, 16, 32, 60, 96]))
    k = int(rng.choice([0, 1, 2, 5, 10, 16]))
    mu = float(rng.choice([1.0, 0.5, 0.3, 0.1, 0.03, 0.01, 1e-3]))
    scale = (float(rng.uniform(1.0, 3.0)), float(rng.uniform(3.0, 8.0)))
    fn = random_fn(vocab, 1000 + seed, scale)
    tree, _, _ = build(TalonBuilder(budget, k, mu), fn, vocab)
    ref = reference_talon(fn, vocab, ROOT, budget, k, mu)
    assert tree.token == ref.token
    assert tree.parent == ref.parent
    assert tree.depth == ref.depth
    assert tree.path_logprob == pytest.approx(ref.path_logprob, abs=1e-6)


@pytest.mark.parametrize("seed", range(8))
def test_talon_matches_reference_with_sparse_drafter(seed: int) -> None:
    """Same, for a drafter that proposes only a few tokens per context (the rest -inf)."""
    fn = sparse_random_fn(60, finite=1 + seed % 4, tag=seed)
    tree, forwards, drafter = build(TalonBuilder(40, 10, 0.01), fn, 60)
    check_common(tree, fn, forwards, drafter)
    ref = reference_talon(fn, 60, ROOT, 40, 10, 0.01)
    assert (tree.token, tree.parent) == (ref.token, ref.parent)


def test_talon_near_one_hot_gives_root_layer_then_chain() -> None:
    """Drafter with mass 1 - eps on one token (eps spread over the rest, so full support).  Root layer:
    K children.  Every later layer: the best candidate has p ~ (1 - eps)^d while the runner-up has
    p <= (1 - eps)^(d-1) * eps / (V - 1), a ratio ~5e-5 < mu, so exactly one node passes the gate,
    and it is the one-hot child of the previous chain node, starting under the best root child.
    With N drafts: K + (N - K) nodes, depth 1 + (N - K) = N - K + 1, and N - K + 1 forwards."""
    vocab, budget, k, mu = 20, 30, 5, 0.03
    fn = one_hot_fn(vocab, eps=1e-3)
    tree, forwards, drafter = build(TalonBuilder(budget, k, mu), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert tree.layer_widths() == [1, k] + [1] * (budget - k)
    assert tree.max_depth == budget - k + 1 == forwards
    chain = list(range(k + 1, budget + 1))
    assert tree.children(0) == list(range(1, k + 1))
    assert tree.token[1] == (ROOT + 1) % vocab  # the best root child comes first
    assert tree.parent[chain[0]] == 1
    for prev, node in zip(chain, chain[1:]):
        assert tree.parent[node] == prev
    for node in [1] + chain:
        assert tree.token[node] == (tree.token[tree.parent[node]] + 1) % vocab
    check_talon_gate(tree, fn, vocab, budget, k, mu)


def test_talon_strict_one_hot_is_a_chain_of_n() -> None:
    """A strict one-hot drafter (-inf elsewhere) has a single finite root candidate, so the tree is a
    chain of all N drafts (depth N), never a -inf node."""
    vocab, budget = 20, 12
    fn = one_hot_fn(vocab, eps=0.0)
    tree, forwards, drafter = build(TalonBuilder(budget, 10, 0.03), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert tree.layer_widths() == [1] * (budget + 1)
    assert forwards == budget


@pytest.mark.parametrize("vocab,budget,k", [(20, 30, 5), (50, 60, 10), (10, 60, 10), (100, 60, 1)])
def test_talon_uniform_drafter_gives_depth_two(vocab: int, budget: int, k: int) -> None:
    """Uniform drafter: every layer-2 candidate ties with the best, so all pass the gate and the budget
    check fills the rest of N in one wide layer (needs K * V >= N - K)."""
    assert k * vocab >= budget - k
    fn = uniform_fn(vocab)
    tree, forwards, drafter = build(TalonBuilder(budget, k, 0.03), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert tree.layer_widths() == [1, k, budget - k]
    assert forwards == 2


def test_talon_uniform_small_vocab_is_breadth_first() -> None:
    """With K * V < N - K the uniform tree is filled level by level: 2, 2*4, 2*16, then the rest."""
    fn = uniform_fn(4)
    tree, _, _ = build(TalonBuilder(60, 2, 0.03), fn, 4)
    assert tree.layer_widths() == [1, 2, 8, 32, 18]


@pytest.mark.parametrize("tag", range(5))
def test_talon_mu_one_is_chain_after_root(tag: int) -> None:
    """mu = 1 admits only the best candidate(s) of each layer: a chain below the root layer, each link
    the argmax of the full candidate pool (checked by the gate)."""
    vocab, budget, k = 50, 20, 4
    fn = random_fn(vocab, 50 + tag)
    tree, forwards, _ = build(TalonBuilder(budget, k, 1.0), fn, vocab)
    assert tree.layer_widths() == [1, k] + [1] * (budget - k)
    assert forwards == budget - k + 1
    check_talon_gate(tree, fn, vocab, budget, k, 1.0)


@pytest.mark.parametrize("tag", range(3))
def test_talon_tiny_mu_is_breadth_first_fill(tag: int) -> None:
    """mu -> 0 (1e-300, below any path probability here) admits every candidate, so layers fill
    completely (K, K*V, K*V^2, ...) until the budget cuts the last one to the best remaining."""
    vocab, budget, k = 3, 30, 2
    fn = random_fn(vocab, 70 + tag)
    tree, forwards, _ = build(TalonBuilder(budget, k, 1e-300), fn, vocab)
    assert tree.layer_widths() == [1, 2, 6, 18, 4]
    assert forwards == 4
    check_talon_gate(tree, fn, vocab, budget, k, 1e-300)


def test_talon_gated_root_near_one_hot_is_a_chain_of_n() -> None:
    """K=0 (pure gating): a near-one-hot drafter's runner-up is ~5e-5 of the best at every layer,
    the root's included, so the whole budget is one chain: depth N, N forwards (with K=5 the same
    drafter gives a root layer of 5, then a chain)."""
    vocab, budget = 20, 30
    fn = one_hot_fn(vocab, eps=1e-3)
    tree, forwards, drafter = build(TalonBuilder(budget, 0, 0.03), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert tree.layer_widths() == [1] * (budget + 1)
    assert forwards == budget
    for node in range(1, budget + 1):
        assert tree.token[node] == (tree.token[tree.parent[node]] + 1) % vocab


@pytest.mark.parametrize("vocab,budget", [(20, 12), (50, 60), (10, 60)])
def test_talon_gated_root_uniform_drafter(vocab: int, budget: int) -> None:
    """K=0 with a uniform drafter: every root child ties with the best, so the first layer takes
    min(V, N) and the rest fills breadth first; with V >= N the tree is one layer of N."""
    fn = uniform_fn(vocab)
    tree, forwards, drafter = build(TalonBuilder(budget, 0, 0.03), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    widths = tree.layer_widths()
    assert widths[1] == min(vocab, budget) and sum(widths[1:]) == budget
    assert forwards == len(widths) - 1


def test_talon_gated_root_records_the_root_gate() -> None:
    """K=0: the root layer's gate record has a threshold (log mu + best) and statuses from the gate,
    not ``beyond K``; the admitted candidates are exactly the root's children."""
    vocab, mu = 40, 0.2
    fn = random_fn(vocab, 9, (2.0, 4.0))
    result = TalonBuilder(30, 0, mu).build(TableDrafter(vocab, fn), [ROOT], record_gate=True)
    root = result.gate[0]
    assert root.depth == 1 and root.threshold == pytest.approx(root.best + math.log(mu))
    admitted = [t for t, st in zip(root.tokens, root.status) if st == ADMITTED]
    assert sorted(admitted) == sorted(result.tree.token[c] for c in result.tree.children(0))
    assert BEYOND_K not in root.status and BELOW_GATE in root.status
    assert all((lp >= root.threshold) == (st != BELOW_GATE) for lp, st in zip(root.path_logprobs, root.status))


@pytest.mark.parametrize(
    "budget,k,widths,forwards",
    [
        (1, 10, [1, 1], 1),
        (3, 10, [1, 3], 1),
        (10, 10, [1, 10], 1),
        (11, 10, [1, 10, 1], 2),
    ],
)
def test_talon_small_budgets(budget: int, k: int, widths: list[int], forwards: int) -> None:
    """N <= K: the root layer alone (min(K, N) children, one forward); N = K + 1: one more node."""
    fn = random_fn(40, 5)
    tree, fw, _ = build(TalonBuilder(budget, k, 1.0), fn, 40)
    assert tree.layer_widths() == widths
    assert fw == forwards


# ---- drafters with -inf entries (all builders) --------------------------------------------------------
def dead_end_fn(vocab: int, finite: int, max_context: int) -> LogprobFn:
    """Sparse random rows while the context has at most ``max_context`` tokens, all -inf after."""
    sparse = sparse_random_fn(vocab, finite, tag=9)
    return lambda ctx: sparse(ctx) if len(ctx) <= max_context else torch.full((vocab,), -math.inf)


def test_dead_end_drafter_gives_smaller_trees() -> None:
    """Two finite tokens per context for contexts up to 3 tokens (root + 2 drafts), none beyond: every
    builder stops early with only finite nodes; the forward that found nothing is still counted."""
    vocab = 30
    fn = dead_end_fn(vocab, finite=2, max_context=3)
    tree, forwards, drafter = build(TalonBuilder(60, 10, 1e-9), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert tree.layer_widths() == [1, 2, 4, 8] and forwards == 4

    tree, forwards, drafter = build(ChainBuilder(5), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert tree.layer_widths() == [1, 1, 1, 1] and forwards == 4

    tree, forwards, drafter = build(Eagle2Builder(60, 10, 6), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert tree.layer_widths() == [1, 2, 4, 8] and forwards == 4

    paths = default_static_paths(20, 6)
    tree, forwards, drafter = build(StaticBuilder(paths), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    alive = {p for p in paths if len(p) <= 3 and max(p) < 2}
    assert tree.num_drafts == len(alive) < 20
    assert forwards == sum(any(len(p) == d and p[:-1] in alive | {()} for p in paths) for d in range(1, 7))


@pytest.mark.parametrize(
    "make",
    [
        lambda: TalonBuilder(30, 10, 0.03),
        lambda: ChainBuilder(4),
        lambda: Eagle2Builder(30, 5, 4),
        lambda: StaticBuilder(default_static_paths(10, 4)),
    ],
)
def test_all_minus_inf_root_gives_root_only_tree(make: Callable[[], TreeBuilder]) -> None:
    fn = lambda ctx: torch.full((12,), -math.inf)  # noqa: E731
    tree, forwards, drafter = build(make(), fn, 12)
    assert len(tree) == 1 and forwards == 1
    check_common(tree, fn, forwards, drafter)


@pytest.mark.parametrize("finite", [1, 2, 3])
@pytest.mark.parametrize(
    "make",
    [
        lambda: TalonBuilder(40, 10, 0.03),
        lambda: ChainBuilder(6),
        lambda: Eagle2Builder(40, 8, 5),
        lambda: StaticBuilder(default_static_paths(40, 6)),
    ],
)
def test_sparse_drafters_never_admit_minus_inf(finite: int, make: Callable[[], TreeBuilder]) -> None:
    fn = sparse_random_fn(50, finite, tag=finite)
    tree, forwards, drafter = build(make(), fn, 50)
    check_common(tree, fn, forwards, drafter)
    assert tree.num_drafts <= 40
    assert all(len(tree.children(i)) <= finite for i in range(len(tree)))


# ---- generic properties for every builder -------------------------------------------------------------
BUILDERS = {
    "chain": (lambda: ChainBuilder(5), 5, 5),  # (factory, drafts, forwards)
    "static": (lambda: StaticBuilder(default_static_paths(20, 5)), 20, None),
    "eagle2": (lambda: Eagle2Builder(20, 4, 4), 20, 4),
    "talon": (lambda: TalonBuilder(20, 4, 0.03), 20, None),
    "talon-defaults": (lambda: TalonBuilder(60, 10, 0.03), 60, None),
}


@pytest.mark.parametrize("name", list(BUILDERS))
@pytest.mark.parametrize("tag", range(4))
def test_builder_budget_and_common_properties(name: str, tag: int) -> None:
    """Full-support drafter: each builder spends exactly its budget, with valid, finite, duplicate-free
    trees, and counts one forward per layer."""
    make, drafts, fw = BUILDERS[name]
    fn = random_fn(64, 200 + tag)
    tree, forwards, drafter = build(make(), fn, 64)
    check_common(tree, fn, forwards, drafter)
    assert tree.num_drafts == drafts
    assert forwards == (fw if fw is not None else tree.max_depth)


def test_builder_is_reusable_and_deterministic() -> None:
    """Building twice with the same drafter state gives the same tree and forward count."""
    fn = random_fn(64, 1)
    for make, _, _ in BUILDERS.values():
        b = make()
        t1, f1, _ = build(b, fn, 64)
        t2, f2, _ = build(b, fn, 64)
        assert (t1, f1) == (t2, f2)


# ---- chain -------------------------------------------------------------------------------------------
@pytest.mark.parametrize("gamma", [1, 4, 9])
def test_chain_is_greedy_drafter_path(gamma: int) -> None:
    fn = random_fn(40, 3)
    tree, forwards, drafter = build(ChainBuilder(gamma), fn, 40)
    check_common(tree, fn, forwards, drafter)
    assert tree.parent == [-1] + list(range(gamma))
    assert forwards == gamma
    for node in range(1, len(tree)):
        assert tree.token[node] == int(np.argmax(row(fn, node_tokens(tree, node - 1))))


# ---- static ------------------------------------------------------------------------------------------
@pytest.mark.parametrize("budget,max_depth", [(1, 1), (3, 1), (10, 3), (20, 5), (60, 8), (39, 3), (12, 2)])
def test_default_static_paths(budget: int, max_depth: int) -> None:
    """Exactly ``budget`` distinct rank paths, depth <= max_depth, parents listed first (breadth-first),
    ranks < len(prior), and their prior values are the best ``budget`` of all possible paths."""
    prior = DEFAULT_STATIC_RANK_PRIOR
    paths = default_static_paths(budget, max_depth)
    assert len(paths) == len(set(paths)) == budget
    assert all(1 <= len(p) <= max_depth and all(0 <= r < len(prior) for r in p) for p in paths)
    assert list(paths) == sorted(paths, key=lambda p: (len(p), p))
    seen: set[tuple[int, ...]] = set()
    for p in paths:
        assert len(p) == 1 or p[:-1] in seen
        seen.add(p)

    def value(p: tuple[int, ...]) -> float:
        return math.prod(prior[r] for r in p)

    every = [p for d in range(1, max_depth + 1) for p in itertools.product(range(len(prior)), repeat=d)]
    best = sorted((value(p) for p in every), reverse=True)[:budget]
    assert sorted((value(p) for p in paths), reverse=True) == pytest.approx(best, rel=1e-12)


def test_default_static_paths_too_deep_raises() -> None:
    with pytest.raises(ValueError):
        default_static_paths(4, 1)  # at most 3 nodes in one layer
    with pytest.raises(ValueError):
        default_static_paths(40, 3)  # at most 3 + 9 + 27 = 39


def test_default_static_paths_zero_depth_raises() -> None:
    """No node fits in zero layers, so any budget must raise; today (0,), (1,) come back for budget 2.
    Not reachable through TreeConfig (depth >= 1 is enforced there)."""
    with pytest.raises(ValueError):
        default_static_paths(2, 0)


@pytest.mark.parametrize(
    "paths",
    [
        default_static_paths(20, 5),
        ((0,), (1,), (2,), (0, 0), (0, 1), (1, 0), (0, 0, 0), (0, 0, 1), (0, 1, 0)),
        ((1,), (0,), (1, 3), (0, 0), (1, 3, 0)),  # not breadth-first, skips ranks
    ],
)
def test_static_builder_fills_ranks(paths: tuple[tuple[int, ...], ...]) -> None:
    """Every path becomes one node whose token is the path's last rank among its parent's drafter
    tokens (ranked over the full vocabulary); one forward per depth."""
    fn = random_fn(40, 11)
    tree, forwards, drafter = build(StaticBuilder(paths), fn, 40)
    check_common(tree, fn, forwards, drafter)
    assert tree.num_drafts == len(paths)
    assert forwards == max(len(p) for p in paths)
    rank_paths = set()
    for node in range(1, len(tree)):
        ranks = []
        for i in node_path(tree, node)[1:]:
            r = row(fn, node_tokens(tree, tree.parent[i]))
            ranks.append(int((r > r[tree.token[i]]).sum()))
        rank_paths.add(tuple(ranks))
    assert rank_paths == set(paths)


# ---- EAGLE-2 -----------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "vocab,budget,k,depth,tag",
    [
        (30, 25, 4, 5, 0),
        (60, 60, 10, 7, 1),
        (100, 60, 10, 3, 2),
        (50, 10, 3, 6, 3),
        (40, 200, 5, 4, 4),
        (80, 20, 1, 8, 5),
    ],
)
def test_eagle2(vocab: int, budget: int, k: int, depth: int, tag: int) -> None:
    """Root top-k, frontier of width k per layer (the best k of the previous layer's candidates), depth
    forwards, every candidate recorded, final tree = top-N of all recorded (connected), and equal to the
    full-vocabulary reference."""
    fn = random_fn(vocab, 300 + tag)
    tree, forwards, drafter = build(Eagle2Builder(budget, k, depth), fn, vocab)
    check_common(tree, fn, forwards, drafter)
    assert forwards == depth
    calls = drafter.calls
    assert calls[0].frontier == [0]
    full = calls[-1].tree  # the builder's tree before the re-rank, every candidate in it
    assert calls[0].size == 1 and all(c.tree is full for c in calls[1:])
    sizes = [c.size for c in calls] + [len(full)]
    # Layer 1 = the root's top-k over the full vocabulary.
    r0 = row(fn, (ROOT,))
    assert {full.token[i] for i in range(1, sizes[1])} == set(np.argsort(-r0, kind="stable")[:k].tolist())
    for j in range(1, len(calls)):
        prev_layer = range(sizes[j - 1] if j > 1 else 1, sizes[j])
        frontier = calls[j].frontier
        assert len(frontier) == min(k, len(prev_layer))
        best = sorted(prev_layer, key=lambda i: -full.path_logprob[i])[:k]
        assert sorted(full.path_logprob[i] for i in frontier) == sorted(full.path_logprob[i] for i in best)
        # Every frontier node got exactly its top-k children recorded.
        for f in frontier:
            kids = {full.token[c] for c in full.children(f)}
            rf = row(fn, node_tokens(full, f))
            assert kids == set(np.argsort(-rf, kind="stable")[:k].tolist())
    assert len(full) - 1 == k + (depth - 1) * k * k
    # Final tree: the best N recorded candidates.
    scores = sorted((full.path_logprob[i] for i in range(1, len(full))), reverse=True)
    assert tree.num_drafts == min(budget, len(full) - 1)
    assert sorted(tree.path_logprob[1:], reverse=True) == scores[: tree.num_drafts]
    ref = reference_eagle2(fn, vocab, ROOT, budget, k, depth)
    got = paths_below_root(tree)
    assert set(got) == set(ref)
    for path, lp in ref.items():
        assert got[path] == pytest.approx(lp, abs=1e-6)


def test_eagle2_rerank_keeps_tree_connected_with_ties() -> None:
    """A uniform drafter makes every candidate of a layer tie; the re-rank must still keep parents."""
    fn = uniform_fn(6)
    for budget in (1, 5, 7, 13, 30):
        tree, _, _ = build(Eagle2Builder(budget, 3, 4), fn, 6)
        tree.validate()
        assert tree.num_drafts == budget
        assert tree.layer_widths()[1] == min(3, budget)


# ---- make_builder ------------------------------------------------------------------------------------
def test_make_builder_maps_config() -> None:
    plain = make_builder(TreeConfig(method="ar"))
    assert isinstance(plain, RootOnlyBuilder)
    drafter = TableDrafter(5, lambda ctx: torch.zeros(5))
    result = plain.build(drafter, [1, 2, 3])
    assert len(result.tree) == 1 and result.tree.token == [3] and result.drafter_forwards == 0
    assert drafter.calls == [] and result.call_widths == []  # the drafter is never asked
    b = make_builder(TreeConfig(method="chain", gamma=7))
    assert isinstance(b, ChainBuilder) and b.gamma == 7
    b = make_builder(TreeConfig(method="eagle2", budget=33, topk=6, depth=5))
    assert isinstance(b, Eagle2Builder) and (b.budget, b.topk, b.depth) == (33, 6, 5)
    b = make_builder(TreeConfig(method="talon", budget=41, topk=7, mu=0.25))
    assert isinstance(b, TalonBuilder) and (b.budget, b.topk) == (41, 7)
    assert b.log_mu == pytest.approx(math.log(0.25))
    b = make_builder(TreeConfig(method="static", budget=12, depth=4))
    assert isinstance(b, StaticBuilder)
    assert set(b.paths) == set(default_static_paths(12, 4))
    paths = ((0,), (1,), (0, 0))
    b = make_builder(TreeConfig(method="static", static_paths=paths))
    assert isinstance(b, StaticBuilder) and set(b.paths) == set(paths)


def test_a_static_tree_that_does_not_fit_its_depth_is_refused_by_its_config() -> None:
    # refused where the settings are checked, before a model loads or a page changes
    with pytest.raises(ConfigError, match="do not fit in a static tree of depth 2 \\(at most 12"):
        TreeConfig(method="static", budget=50, depth=2)
    for depth in (1, 2, 3, 5):  # the config's capacity is the default static tree's
        assert len(default_static_paths(static_capacity(depth), depth)) == static_capacity(depth)
        with pytest.raises(ValueError):
            default_static_paths(static_capacity(depth) + 1, depth)
    assert len(DEFAULT_STATIC_RANK_PRIOR) == STATIC_MAX_CHILDREN
    TreeConfig(method="talon", budget=50, depth=2)  # the depth caps only the static tree's size


@pytest.mark.parametrize("method", ["chain", "static", "eagle2", "talon"])
def test_make_builder_trees_respect_budget(method: str) -> None:
    cfg = TreeConfig(method=method, budget=24, topk=5, mu=0.05, depth=5, gamma=6)
    fn = random_fn(64, 17)
    tree, forwards, drafter = build(make_builder(cfg), fn, 64)
    check_common(tree, fn, forwards, drafter)
    assert tree.num_drafts == (cfg.gamma if method == "chain" else cfg.budget)
