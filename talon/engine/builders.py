"""Tree policies behind one interface: each grows a ``DraftTree`` by asking a drafter for the next-token
log-probabilities of a whole frontier in one call per layer.

Every builder only admits tokens with a finite draft log-probability, so a drafter that proposes few
tokens (prompt lookup) yields a smaller tree than the budget.  Siblings never repeat a token.
Budgets count draft nodes, the root excluded.  A builder holds only its settings: everything one
``build`` call produces lives in that call's ``Growth``, so one builder can serve several threads.
"""
from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..config import ConfigError, TreeConfig
from ..drafters.base import Drafter, Proposal
from ..tree import DraftTree

DEFAULT_STATIC_RANK_PRIOR = (0.6, 0.2, 0.1)
"""Assumed acceptance of a node's best, second and third child, used only to give the default static
tree its fixed shape (at most 3 children per node)."""


@dataclass
class BuildResult:
    tree: DraftTree
    drafter_forwards: int
    """Number of drafter calls made (``begin_step`` + ``propose``; one batched forward each)."""
    root_logprobs: torch.Tensor | None = None
    """The drafter's next-token log-probabilities after the root, ``[vocab]`` (async mode guesses from it)."""


class Growth:
    """One ``build`` call's state: the tree being grown, the drafter, and the forwards counted."""

    def __init__(self, drafter: Drafter, root_token: int) -> None:
        self.drafter = drafter
        self.tree = DraftTree.with_root(root_token)
        self.forwards = 0
        self.root_logprobs: torch.Tensor | None = None

    def root(self) -> Proposal:
        """The drafter's proposal after the root (starts the drafter's step)."""
        self.forwards += 1
        proposal = self.drafter.begin_step(self.tree)
        self.root_logprobs = proposal.logprobs[0]
        return proposal

    def expand(self, frontier: Sequence[int]) -> Proposal:
        """The drafter's proposal after each node of ``frontier`` (draft nodes, parents grown before)."""
        self.forwards += 1
        return self.drafter.propose(self.tree, list(frontier))

    def add(self, proposal: Proposal, frontier: Sequence[int], picks: Sequence[tuple[int, int, float]]) -> list[int]:
        """Add ``picks`` = ``(row, token, logprob)``: ``token`` as a child of ``frontier[row]`` (``frontier``
        = the nodes ``proposal`` answered for, ``[0]`` for the root), labelled with its source.
        Returns the new node ids in ``picks`` order."""
        sources = proposal.sources([r for r, _, _ in picks], [t for _, t, _ in picks])
        return [self.tree.add(frontier[r], t, lp, s) for (r, t, lp), s in zip(picks, sources)]

    def result(self, tree: DraftTree | None = None) -> BuildResult:
        return BuildResult(tree if tree is not None else self.tree, self.forwards, self.root_logprobs)


class TreeBuilder(ABC):
    """Strategy interface for tree construction; a new method is one new subclass."""

    name: str = "builder"

    def build(self, drafter: Drafter, root_token: int) -> BuildResult:
        """Grow a tree below ``root_token`` (the last committed token) with ``drafter``."""
        growth = Growth(drafter, root_token)
        return growth.result(self._grow(growth))

    @abstractmethod
    def _grow(self, growth: Growth) -> DraftTree:
        """Grow draft nodes below ``growth.tree`` (which holds only the root); return the final tree."""


def _top_finite(logprobs: torch.Tensor, k: int) -> list[tuple[int, float]]:
    """The ``k`` best (token, logprob) of a ``[vocab]`` row, skipping ``-inf``, best first."""
    k = min(k, logprobs.shape[-1])
    values, tokens = logprobs.topk(k)
    return [(t, v) for t, v in zip(tokens.tolist(), values.tolist()) if v > -math.inf]


def _top_finite_rows(logprobs: torch.Tensor, k: int) -> list[list[tuple[int, float]]]:
    """``_top_finite`` of every row of ``[rows, vocab]`` with one host sync."""
    k = min(k, logprobs.shape[-1])
    values, tokens = logprobs.topk(k, dim=-1)
    return [[(t, v) for t, v in zip(tr, vr) if v > -math.inf] for tr, vr in zip(tokens.tolist(), values.tolist())]


class ChainBuilder(TreeBuilder):
    """Classic speculative decoding: the drafter's greedy chain of ``gamma`` tokens."""

    name = "chain"

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma

    def _grow(self, growth: Growth) -> DraftTree:
        node = 0
        for _ in range(self.gamma):
            proposal = growth.root() if node == 0 else growth.expand([node])
            best = _top_finite(proposal.logprobs[0], 1)
            if not best:
                break
            node = growth.add(proposal, [node], [(0, *best[0])])[0]
        return growth.tree


def default_static_paths(budget: int, max_depth: int,
                         prior: tuple[float, ...] = DEFAULT_STATIC_RANK_PRIOR) -> tuple[tuple[int, ...], ...]:
    """A fixed tree of exactly ``budget`` nodes (root excluded) and depth <= ``max_depth``, grown
    best-first by the product of ``prior[rank]`` along each path; returned breadth-first.
    Raises ``ValueError`` if ``budget`` nodes do not fit in ``max_depth`` layers."""
    if max_depth < 1:
        raise ValueError(f"a static tree needs at least one layer (max_depth={max_depth})")
    heap = [(-prior[r], (r,)) for r in range(len(prior))]
    heapq.heapify(heap)
    chosen = []
    while heap and len(chosen) < budget:
        neg_value, path = heapq.heappop(heap)
        chosen.append(path)
        if len(path) < max_depth:
            for r, a in enumerate(prior):
                heapq.heappush(heap, (neg_value * a, path + (r,)))
    if len(chosen) < budget:
        raise ValueError(f"{budget} nodes do not fit in a static tree of depth {max_depth}")
    return tuple(sorted(chosen, key=lambda p: (len(p), p)))


class StaticBuilder(TreeBuilder):
    """A fixed shape given as child-rank paths (``(0, 1)`` = second-best child of the best root
    child); the drafter only fills in which tokens those ranks are.  One forward per layer."""

    name = "static"

    def __init__(self, paths: tuple[tuple[int, ...], ...]) -> None:
        self.paths = tuple(sorted((tuple(p) for p in paths), key=len))

    def _grow(self, growth: Growth) -> DraftTree:
        node_of: dict[tuple[int, ...], int] = {(): 0}
        for depth in range(1, max((len(p) for p in self.paths), default=0) + 1):
            layer = [p for p in self.paths if len(p) == depth and p[:-1] in node_of]
            if not layer:
                break
            parents = list(dict.fromkeys(node_of[p[:-1]] for p in layer))
            proposal = growth.root() if depth == 1 else growth.expand(parents)
            deepest_rank = {parent: 1 + max(p[-1] for p in layer if node_of[p[:-1]] == parent) for parent in parents}
            ranked = _top_finite_rows(proposal.logprobs, max(deepest_rank.values()))
            row_of = {parent: row for row, parent in enumerate(parents)}
            picks, kept = [], []
            for path in layer:
                row = row_of[node_of[path[:-1]]]
                if path[-1] < len(ranked[row]):
                    picks.append((row, *ranked[row][path[-1]]))
                    kept.append(path)
            for path, node in zip(kept, growth.add(proposal, parents, picks)):
                node_of[path] = node
        return growth.tree


class Eagle2Builder(TreeBuilder):
    """EAGLE-2's dynamic tree: the root's top-k, then for ``depth - 1`` more layers expand the k
    best frontier nodes (top-k children each, scored by cumulative log-probability, every candidate
    recorded), finally re-rank all recorded candidates and keep the best ``budget``."""

    name = "eagle2"

    def __init__(self, budget: int, topk: int, depth: int) -> None:
        self.budget, self.topk, self.depth = budget, topk, depth

    def _grow(self, growth: Growth) -> DraftTree:
        tree = growth.tree
        proposal = growth.root()
        frontier = growth.add(proposal, [0], [(0, t, lp) for t, lp in _top_finite(proposal.logprobs[0], self.topk)])
        for _ in range(self.depth - 1):
            if not frontier:
                break
            proposal = growth.expand(frontier)
            candidates = []
            for row, options in enumerate(_top_finite_rows(proposal.logprobs, self.topk)):
                parent_lp = tree.path_logprob[frontier[row]]
                candidates += [(parent_lp + lp, row, token, lp) for token, lp in options]
            # Stable sort: equal scores keep expansion order.
            candidates.sort(key=lambda c: -c[0])
            added = growth.add(proposal, frontier, [(row, token, lp) for _, row, token, lp in candidates])
            frontier = added[: self.topk]
        # Re-rank every recorded candidate.  Ties go to the earlier node, which keeps a parent (score
        # >= its child's) ahead of its children, so the kept set stays connected.
        order = sorted(range(1, len(tree)), key=lambda i: (-tree.path_logprob[i], i))
        return tree.subset([0] + sorted(order[: self.budget]))


class TalonBuilder(TreeBuilder):
    """TALON (arXiv 2601.07353, Algorithm 2): a budget-driven, confidence-gated tree.

    Layer 1 is the root's Top-K.  Every later layer considers all children of the previous layer,
    scored by path probability p(u) = p(parent) q(u | parent); it admits those with
    ``p(u) >= mu * max p`` over the layer's candidates, then keeps the best ``budget - |drafts|`` if
    that overflows the budget.  Every admitted node is a parent of the next layer; no re-rank.

    Exact shortcut: only each parent's best ``R = budget - |drafts|`` children can be admitted (a
    Top-R selection never takes a parent's (R+1)-th child over its first R), so the candidate pool is
    ``[parents, R]`` rather than ``[parents, vocab]``.  All scores are log probabilities."""

    name = "talon"

    def __init__(self, budget: int, topk: int, mu: float) -> None:
        self.budget, self.topk, self.log_mu = budget, topk, math.log(mu)

    def _grow(self, growth: Growth) -> DraftTree:
        tree = growth.tree
        proposal = growth.root()
        top = _top_finite(proposal.logprobs[0], min(self.topk, self.budget))
        layer = growth.add(proposal, [0], [(0, t, lp) for t, lp in top])
        while layer and tree.num_drafts < self.budget:
            layer = self._next_layer(growth, layer)
        return tree

    def _next_layer(self, growth: Growth, parents: list[int]) -> list[int]:
        """Admit the gated, budget-checked children of ``parents`` (one drafter call)."""
        tree = growth.tree
        proposal = growth.expand(parents)
        logprobs = proposal.logprobs                                               # [parents, vocab]
        room = self.budget - tree.num_drafts
        parent_lp = torch.tensor([tree.path_logprob[p] for p in parents], dtype=logprobs.dtype,
                                 device=logprobs.device)
        child_lp, tokens = logprobs.topk(min(room, logprobs.shape[1]), dim=1)   # [parents, R]
        scores = parent_lp[:, None] + child_lp                                     # path log-probs
        best = scores.max()
        if best == -math.inf:
            return []
        admitted = (scores >= best + self.log_mu) & (scores > -math.inf)
        rows, cols = admitted.nonzero(as_tuple=True)
        # Best first, keep at most `room`; ties keep (parent order, rank) order.
        order = torch.argsort(-scores[rows, cols], stable=True)[:room].tolist()
        rows, cols = rows.tolist(), cols.tolist()
        tokens, child_lp = tokens.tolist(), child_lp.tolist()  # one device sync, not two per node
        picks = [(rows[k], tokens[rows[k]][cols[k]], child_lp[rows[k]][cols[k]]) for k in order]
        return growth.add(proposal, parents, picks)


def make_builder(cfg: TreeConfig) -> TreeBuilder | None:
    """The builder for ``cfg.method`` (``None`` for plain autoregressive decoding)."""
    if cfg.method == "ar":
        return None
    if cfg.method == "chain":
        return ChainBuilder(cfg.gamma)
    if cfg.method == "static":
        if cfg.static_paths:
            return StaticBuilder(cfg.static_paths)
        try:
            return StaticBuilder(default_static_paths(cfg.budget, cfg.depth))
        except ValueError as err:
            raise ConfigError(f"Static tree: {err}; raise the depth or lower the budget N.") from err
    if cfg.method == "eagle2":
        return Eagle2Builder(cfg.budget, cfg.topk, cfg.depth)
    return TalonBuilder(cfg.budget, cfg.topk, cfg.mu)  # talon, and hybrid (a TALON tree, hybrid drafter)
