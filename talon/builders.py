"""Tree policies behind one interface: each grows a ``DraftTree`` by asking a drafter for the next-token
log-probabilities of a whole frontier in one call per layer.

Every builder only admits tokens with a finite draft log-probability, so a drafter that proposes few
tokens (prompt lookup) yields a smaller tree than the budget.  Siblings never repeat a token.
Budgets count draft nodes, the root excluded.
"""
from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from dataclasses import dataclass

import torch

from .config import ConfigError, TreeConfig
from .drafters import Drafter
from .tree import DraftTree

DEFAULT_STATIC_RANK_PRIOR = (0.6, 0.2, 0.1)
"""Assumed acceptance of a node's best, second and third child, used only to give the default static
tree its fixed shape (at most 3 children per node)."""


@dataclass
class BuildResult:
    tree: DraftTree
    drafter_forwards: int
    """Number of ``Drafter.propose`` calls made (one batched forward each)."""
    root_logprobs: torch.Tensor | None = None
    """The drafter's next-token log-probabilities after the root, ``[vocab]`` (async mode guesses from it)."""


class TreeBuilder(ABC):
    """Strategy interface for tree construction; a new method is one new subclass."""

    name: str = "builder"

    def build(self, drafter: Drafter, root_token: int) -> BuildResult:
        self._forwards = 0
        self._drafter = drafter
        self._root_logprobs = None
        tree = self._grow(DraftTree.with_root(root_token))
        return BuildResult(tree, self._forwards, self._root_logprobs)

    def _propose(self, tree: DraftTree, frontier: list[int]) -> torch.Tensor:
        self._forwards += 1
        logprobs = self._drafter.propose(tree, frontier)
        if frontier == [0]:
            self._root_logprobs = logprobs[0]
        return logprobs

    def _add(self, tree: DraftTree, parent: int, token: int, logprob: float) -> int:
        return tree.add(parent, token, logprob, self._drafter.source_of(parent, token))

    @abstractmethod
    def _grow(self, tree: DraftTree) -> DraftTree:
        """Grow draft nodes below ``tree`` (which holds only the root); return the final tree."""


def _top_finite(logprobs: torch.Tensor, k: int) -> list[tuple[int, float]]:
    """The ``k`` best (token, logprob) of a ``[vocab]`` row, skipping ``-inf``, best first."""
    k = min(k, logprobs.shape[-1])
    values, tokens = logprobs.topk(k)
    return [(t, v) for t, v in zip(tokens.tolist(), values.tolist()) if v > -math.inf]


class ChainBuilder(TreeBuilder):
    """Classic speculative decoding: the drafter's greedy chain of ``gamma`` tokens."""

    name = "chain"

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma

    def _grow(self, tree: DraftTree) -> DraftTree:
        node = 0
        for _ in range(self.gamma):
            best = _top_finite(self._propose(tree, [node])[0], 1)
            if not best:
                break
            node = self._add(tree, node, *best[0])
        return tree


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

    def _grow(self, tree: DraftTree) -> DraftTree:
        node_of: dict[tuple[int, ...], int] = {(): 0}
        for depth in range(1, max((len(p) for p in self.paths), default=0) + 1):
            layer = [p for p in self.paths if len(p) == depth and p[:-1] in node_of]
            if not layer:
                break
            parents = list(dict.fromkeys(node_of[p[:-1]] for p in layer))
            logprobs = self._propose(tree, parents)
            ranked = {parent: _top_finite(logprobs[row], 1 + max(p[-1] for p in layer if node_of[p[:-1]] == parent))
                      for row, parent in enumerate(parents)}
            for path in layer:
                options = ranked[node_of[path[:-1]]]
                if path[-1] < len(options):
                    node_of[path] = self._add(tree, node_of[path[:-1]], *options[path[-1]])
        return tree


class Eagle2Builder(TreeBuilder):
    """EAGLE-2's dynamic tree: the root's top-k, then for ``depth - 1`` more layers expand the k
    best frontier nodes (top-k children each, scored by cumulative log-probability, every candidate
    recorded), finally re-rank all recorded candidates and keep the best ``budget``."""

    name = "eagle2"

    def __init__(self, budget: int, topk: int, depth: int) -> None:
        self.budget, self.topk, self.depth = budget, topk, depth

    def _grow(self, tree: DraftTree) -> DraftTree:
        frontier = [self._add(tree, 0, t, lp) for t, lp in _top_finite(self._propose(tree, [0])[0], self.topk)]
        for _ in range(self.depth - 1):
            if not frontier:
                break
            logprobs = self._propose(tree, frontier)
            candidates = []
            for row, parent in enumerate(frontier):
                for token, lp in _top_finite(logprobs[row], self.topk):
                    candidates.append((tree.path_logprob[parent] + lp, parent, token, lp))
            # Stable sort: equal scores keep expansion order.
            candidates.sort(key=lambda c: -c[0])
            added = [self._add(tree, parent, token, lp) for _, parent, token, lp in candidates]
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

    def _grow(self, tree: DraftTree) -> DraftTree:
        layer = [self._add(tree, 0, t, lp)
                 for t, lp in _top_finite(self._propose(tree, [0])[0], min(self.topk, self.budget))]
        while layer and tree.num_drafts < self.budget:
            layer = self._next_layer(tree, layer, self._propose(tree, layer))
        return tree

    def _next_layer(self, tree: DraftTree, parents: list[int], logprobs: torch.Tensor) -> list[int]:
        """Admit the gated, budget-checked children of ``parents`` (``logprobs``: ``[parents, vocab]``)."""
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
        return [self._add(tree, parents[rows[k]], tokens[rows[k]][cols[k]], child_lp[rows[k]][cols[k]])
                for k in order]


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
