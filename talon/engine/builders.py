"""Tree policies behind one interface: each grows a ``DraftTree`` by asking a drafter for the next-token
log-probabilities of a whole frontier in one call per layer.

Every builder only admits tokens with a finite draft log-probability, so a drafter that proposes few
tokens (prompt lookup) yields a smaller tree than the budget.  Siblings never repeat a token.
Budgets count draft nodes, the root excluded.  A builder holds only its settings: everything one
``build`` call produces lives in that call's ``Growth``, so one builder can serve several threads.

A layer's choice is made on the host: the drafter's best children per frontier node come back in one
read-back (``top_children``) and the scoring, gating and ordering run in numpy on those few values
(float64, widened from the drafter's float32), so a layer launches one top-k on the device rather than a few dozen small
operations, which on a GPU cost more host time than the draft head's own forward.
"""

from __future__ import annotations

import heapq
import math
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import torch

from ..config import ConfigError, TreeConfig
from ..drafters.base import Drafter, Proposal
from ..models.row_top import row_topk
from ..tree import (
    ADMITTED,
    BELOW_GATE,
    BEYOND_K,
    CUT_BY_BUDGET,
    CUT_BY_COST,
    SOURCE_RETRIEVAL,
    STOP_CAP,
    STOP_COST,
    STOP_DEPTH,
    STOP_DRAFTER,
    STOP_END,
    STOP_PLAIN,
    DraftTree,
    GateLayer,
)
from .sizing import Candidate, CostRule

DEFAULT_STATIC_RANK_PRIOR = (0.6, 0.2, 0.1)
"""Assumed acceptance of a node's best, second and third child, used only to give the default static
tree its fixed shape (at most ``STATIC_MAX_CHILDREN`` = 3 children per node, which ``TreeConfig`` checks
a budget against)."""


@dataclass
class BuildResult:
    tree: DraftTree
    drafter_forwards: int
    """Number of drafter calls made (``begin_step`` + ``propose``; one batched forward each)."""
    root_logprobs: torch.Tensor | None = None
    """The drafter's next-token log-probabilities after the root, ``[vocab]`` (async mode guesses from it)."""
    call_widths: list[int] = field(default_factory=list)
    """Nodes in each drafter call's frontier, in call order (1 for the root call): what a cost model prices."""
    gate: list[GateLayer] | None = None
    """TALON only, when asked for (``build(..., record_gate=True)``): what the gate saw, per layer."""
    stop: str = STOP_DEPTH
    """Why the tree stopped growing (``talon.tree.STOP_REASONS``)."""
    expected: float = 1.0
    """Expected committed tokens (bonus included) by the run's calibrated confidence."""
    price: float | None = None
    """The step's price in plain steps by the run's cost curve (None without one)."""


@dataclass
class TopChildren:
    """A proposal's best children per frontier node, on the host (``top_children``).

    Attributes:
        logprobs: float64 ``[F, R]`` draft log-probabilities, best first per row (the drafter's float32
            values, widened; ``-inf`` where a row has fewer than ``R`` proposals).
        tokens: int64 ``[F, R]`` their tokens.
        retrieval: bool ``[F, R]`` (a hybrid drafter's): whether retrieval more than the model gave the
            token its probability; None for a single-source drafter.
        source, match: the proposal's (``Proposal``).
    """

    logprobs: np.ndarray
    tokens: np.ndarray
    retrieval: np.ndarray | None
    source: str
    match: list[int] | None

    @property
    def width(self) -> int:
        """R: children per row."""
        return self.tokens.shape[1]


def top_children(proposal: Proposal, r: int) -> TopChildren:
    """The best ``r`` children of every row of ``proposal``: one top-k on the device (``row_topk``: equal
    log-probabilities in token order on the CPU), read back at once (the host's one wait for the device
    in a layer)."""
    logprobs, tokens = row_topk(proposal.logprobs, min(r, proposal.logprobs.shape[-1]))
    retrieval = proposal.from_retrieval.gather(1, tokens) if proposal.from_retrieval is not None else None
    return TopChildren(
        logprobs.cpu().to(torch.float64).numpy(),  # widened on the host (any float dtype; no device op)
        tokens.cpu().numpy(),
        retrieval.cpu().numpy() if retrieval is not None else None,
        proposal.source,
        proposal.match,
    )


class Growth:
    """One ``build`` call's state: the tree being grown, the drafter and the context it drafts at, the
    forwards counted, and (through the run's ``CostRule``) each node's calibrated path acceptance."""

    def __init__(
        self,
        drafter: Drafter,
        committed_ids: Sequence[int],
        target_features: torch.Tensor | None,
        record_gate: bool = False,
        rule: CostRule | None = None,
        max_depth: int | None = None,
    ) -> None:
        self.drafter = drafter
        self.committed_ids, self.target_features = committed_ids, target_features
        self.tree = DraftTree.with_root(committed_ids[-1])
        self.forwards = 0
        self.root_logprobs: torch.Tensor | None = None
        self.call_widths: list[int] = []
        self.gate: list[GateLayer] | None = [] if record_gate else None
        self.rule = rule or CostRule()
        self.accept = [1.0]  # per node: calibrated P(path to it accepted)
        self.siblings: dict[int, float] = {}  # per parent: its children's acceptances given it, summed
        self.stop = STOP_DEPTH
        self.max_depth = max_depth
        """The deepest draft layer the step can use (root at depth 0; None: no limit)."""

    @property
    def sizing(self) -> bool:
        """Whether the cost rule sizes this tree (``TreeConfig.auto``)."""
        return self.rule.sizing

    @property
    def expected(self) -> float:
        return sum(self.accept)

    def root(self) -> Proposal:
        """The drafter's proposal after the root (starts the drafter's step)."""
        self.forwards += 1
        self.call_widths.append(1)
        proposal = self.drafter.begin_step(self.committed_ids, self.target_features)
        self.root_logprobs = proposal.logprobs[0]
        return proposal

    def expand(self, frontier: Sequence[int]) -> Proposal:
        """The drafter's proposal after each node of ``frontier`` (draft nodes, parents grown before)."""
        self.forwards += 1
        self.call_widths.append(len(frontier))
        return self.drafter.propose(self.tree, list(frontier))

    def candidates(
        self,
        top: TopChildren,
        frontier: Sequence[int],
        rows: np.ndarray,
        ranks: np.ndarray,
        keep: np.ndarray | None = None,
    ) -> list[Candidate | None]:
        """Candidates ``j``: the ``ranks[j]``-th best child of ``frontier[rows[j]]`` in ``top`` (``frontier``
        = the nodes the proposal answered for, ``[0]`` for the root), labelled with its source; None where
        ``keep[j]`` (default: all) is False or the log-probability is not finite."""
        logprobs = top.logprobs[rows, ranks]
        ok = np.isfinite(logprobs) if keep is None else keep & np.isfinite(logprobs)
        retrieval = top.retrieval[rows, ranks].tolist() if top.retrieval is not None else [False] * len(ok)
        siblings = dict(self.siblings)  # a parent's candidates come best first; attach keeps a prefix
        out: list[Candidate | None] = []
        tokens = top.tokens[rows, ranks].tolist()
        for r, t, lp, k, flag in zip(rows.tolist(), tokens, logprobs.tolist(), ok.tolist(), retrieval):
            if not k:
                out.append(None)
                continue
            source = SOURCE_RETRIEVAL if flag else top.source
            match = top.match[r] if top.match is not None and source == SOURCE_RETRIEVAL else 0
            c = Candidate(frontier[r], t, lp, source, match)
            self.rule.value(self.tree, c, self.accept, siblings.get(c.parent, 0.0))
            siblings[c.parent] = siblings.get(c.parent, 0.0) + c.given_parent
            out.append(c)
        return out

    def attach(self, candidates: Sequence[Candidate | None]) -> list[int | None]:
        """Add the candidates to the tree; returns, per candidate, its node id (None for a None)."""
        ids: list[int | None] = []
        for c in candidates:
            if c is None:
                ids.append(None)
                continue
            ids.append(self.tree.add(c.parent, c.token, c.logprob, c.source, c.match))
            self.accept.append(c.accept)
            self.siblings[c.parent] = self.siblings.get(c.parent, 0.0) + c.given_parent
        return ids

    def add(self, *args, **kwargs) -> list[int | None]:
        """``candidates`` then ``attach``: every candidate added (fixed-shape policies)."""
        return self.attach(self.candidates(*args, **kwargs))

    def affordable(self, candidates: Sequence[Candidate]) -> int:
        """How many of ``candidates`` (best first) the cost rule keeps (all when it does not size)."""
        if not self.sizing:
            return len(candidates)
        return self.rule.affordable(self.expected, len(self.tree), self.call_widths, [c.accept for c in candidates])

    def deeper(self, frontier: Sequence[int]) -> bool:
        """Whether a layer below ``frontier`` (nodes of one depth) is within ``max_depth``; sets the stop
        reason when it is not."""
        if self.max_depth is not None and frontier and self.tree.depth[frontier[0]] >= self.max_depth:
            self.stop = STOP_END
            return False
        return True

    def layer_pays(self, frontier: Sequence[int], kept: tuple[float, int] | None = None) -> bool:
        """Whether the cost rule would draft a layer below ``frontier`` (always, when it does not size).
        ``kept``: ``(expected tokens, nodes incl. the root)`` of the tree the step would verify as it
        stands, when that is not every node drafted so far (EAGLE-2 records candidates it may not keep)."""
        if not self.sizing:
            return True
        expected, nodes = kept if kept is not None else (self.expected, len(self.tree))
        parents = [self.tree.parent[n] for n in frontier]
        return self.rule.layer_pays(
            expected,
            nodes,
            self.call_widths,
            [self.accept[n] for n in frontier],
            [self.accept[n] / self.accept[p] if self.accept[p] > 0 else 0.0 for n, p in zip(frontier, parents)],
        )

    def result(self, tree: DraftTree | None = None) -> BuildResult:
        tree = tree if tree is not None else self.tree
        expected = self.rule.calibration.expected_tokens(tree) if tree is not self.tree else self.expected
        return BuildResult(
            tree,
            self.forwards,
            self.root_logprobs,
            self.call_widths,
            self.gate,
            self.stop,
            expected,
            self.rule.price(len(tree), self.call_widths),
        )


class TreeBuilder(ABC):
    """Strategy interface for tree construction; a new method is one new subclass."""

    name: str = "builder"
    drafts: bool = True
    """Whether the builder asks the drafter at all (not for plain decoding)."""

    def build(
        self,
        drafter: Drafter,
        committed_ids: Sequence[int],
        target_features: torch.Tensor | None = None,
        record_gate: bool = False,
        rule: CostRule | None = None,
        max_depth: int | None = None,
    ) -> BuildResult:
        """Grow a tree below the last of ``committed_ids`` (the whole committed sequence; the root is its
        last token) with ``drafter``; ``target_features``: the target's states so far, for a feature
        drafter (``talon.drafters.base``).  ``record_gate``: keep what TALON's gate saw
        (``BuildResult.gate``; other builders ignore it).  ``rule``: the run's cost rule (calibration,
        cost curve), which values and prices the tree and, when it sizes, decides how many nodes.
        ``max_depth``: the deepest draft layer the step can commit (root at depth 0): a run with ``r``
        new tokens left commits at most ``r`` a step, bonus included, so it passes ``r - 1``; at 0 the
        step is plain and the drafter is not asked.  None: no limit."""
        growth = Growth(drafter, committed_ids, target_features, record_gate, rule, max_depth)
        if self.drafts and max_depth is not None and max_depth < 1:
            growth.stop = STOP_END
            return growth.result()
        return growth.result(self._grow(growth))

    @abstractmethod
    def _grow(self, growth: Growth) -> DraftTree:
        """Grow draft nodes below ``growth.tree`` (which holds only the root), set ``growth.stop``, and
        return the final tree."""


class RootOnlyBuilder(TreeBuilder):
    """Plain autoregressive decoding: the tree is the root alone and the drafter is never asked, so a
    step costs one target forward of one row, like ``generate()``'s."""

    name = "ar"
    drafts = False

    def _grow(self, growth: Growth) -> DraftTree:
        growth.stop = STOP_PLAIN
        return growth.tree


def _best(top: TopChildren, k: int) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, ranks)`` of the first row's ``k`` best children (the root's proposal has one row)."""
    k = min(k, top.width)
    return np.zeros(k, dtype=np.int64), np.arange(k)


class ChainBuilder(TreeBuilder):
    """Classic speculative decoding: the drafter's greedy chain of ``gamma`` tokens."""

    name = "chain"

    def __init__(self, gamma: int) -> None:
        self.gamma = gamma

    def _grow(self, growth: Growth) -> DraftTree:
        node = 0
        for _ in range(self.gamma):
            if node and not growth.deeper([node]):
                break
            proposal = growth.root() if node == 0 else growth.expand([node])
            top = top_children(proposal, 1)
            added = growth.add(top, [node], *_best(top, 1))
            if not added or added[0] is None:
                growth.stop = STOP_DRAFTER
                break
            node = added[0]
        return growth.tree


def default_static_paths(
    budget: int, max_depth: int, prior: tuple[float, ...] = DEFAULT_STATIC_RANK_PRIOR
) -> tuple[tuple[int, ...], ...]:
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
        deepest = max((len(p) for p in self.paths), default=0)
        self.layers = [[p for p in self.paths if len(p) == depth] for depth in range(1, deepest + 1)]
        """The shape's paths by depth (layer d - 1 holds the paths of length d), worked out once."""

    def _grow(self, growth: Growth) -> DraftTree:
        node_of: dict[tuple[int, ...], int] = {(): 0}
        for depth, shape_layer in enumerate(self.layers, start=1):
            layer = [p for p in shape_layer if p[:-1] in node_of]
            if not layer:
                growth.stop = STOP_DRAFTER
                break
            parents = list(dict.fromkeys(node_of[p[:-1]] for p in layer))
            if depth > 1 and not growth.deeper(parents):
                break
            proposal = growth.root() if depth == 1 else growth.expand(parents)
            row_of = {parent: row for row, parent in enumerate(parents)}
            top = top_children(proposal, 1 + max(p[-1] for p in layer))
            layer = [p for p in layer if p[-1] < top.width]
            rows = np.array([row_of[node_of[p[:-1]]] for p in layer], dtype=np.int64)
            ranks = np.array([p[-1] for p in layer], dtype=np.int64)
            added = growth.add(top, parents, rows, ranks)
            node_of.update({path: node for path, node in zip(layer, added) if node is not None})
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
        top = top_children(proposal, self.topk)
        frontier = [n for n in growth.add(top, [0], *_best(top, self.topk)) if n is not None]
        growth.stop = STOP_DEPTH
        for _ in range(self.depth - 1):
            if not frontier:
                growth.stop = STOP_DRAFTER
                break
            if not growth.deeper(frontier):
                break
            if not growth.layer_pays(frontier, self._kept(growth) if growth.sizing else None):
                growth.stop = STOP_COST
                break
            top = top_children(growth.expand(frontier), self.topk)
            scores = (_path_logprobs(tree, frontier)[:, None] + top.logprobs).ravel()  # [frontier * k]
            # Every candidate is recorded, best first; a stable sort keeps expansion order on ties.
            order = np.argsort(-scores, kind="stable")
            added = growth.add(top, frontier, order // top.width, order % top.width)
            frontier = [n for n in added if n is not None][: self.topk]
        order = self._ranked(tree)
        if growth.sizing:
            order = order[: self._best_prefix(growth, order)]
            if len(order) < min(self.budget, tree.num_drafts):
                growth.stop = STOP_COST
        return tree.subset([0] + sorted(order))

    def _ranked(self, tree: DraftTree) -> list[int]:
        """The best ``budget`` recorded candidates, re-ranked by path probability.  Ties go to the earlier
        node, which keeps a parent (score >= its child's) ahead of its children, so every prefix of the
        ranking is a connected tree."""
        return sorted(range(1, len(tree)), key=lambda i: (-tree.path_logprob[i], i))[: self.budget]

    def _kept(self, growth: Growth) -> tuple[float, int]:
        """``(expected tokens, nodes incl. the root)`` of the tree the step would verify if growth stopped
        now: the best prefix of the re-ranked candidates, not every candidate recorded (which would price
        a 43-node tree after two layers at K=6 where about 6 nodes are kept, and draft layers that a
        consistent estimate refuses)."""
        order = self._ranked(growth.tree)
        m = self._best_prefix(growth, order)
        return 1.0 + sum(growth.accept[n] for n in order[:m]), m + 1

    @staticmethod
    def _best_prefix(growth: Growth, order: list[int]) -> int:
        """The number of re-ranked nodes whose tree has the most expected tokens per unit price."""
        return growth.rule.affordable(1.0, 1, growth.call_widths, [growth.accept[n] for n in order])


class TalonBuilder(TreeBuilder):
    """TALON (arXiv 2601.07353, Algorithm 2): a budget-driven, confidence-gated tree.

    Layer 1 is the root's Top-K.  Every later layer considers all children of the previous layer,
    scored by path probability p(u) = p(parent) q(u | parent); it admits those with
    ``p(u) >= mu * max p`` over the layer's candidates, then keeps the best ``budget - |drafts|`` if
    that overflows the budget.  Every admitted node is a parent of the next layer; no re-rank.
    ``topk=0`` drops the Top-K initialisation: the root's children are gated like every later layer
    (the paper's "k=0", pure gating, Fig. 7), so a confident root gets one child and an unsure one many.

    Exact shortcut: only each parent's best ``R = budget - |drafts|`` children can be admitted (a
    Top-R selection never takes a parent's (R+1)-th child over its first R), so the candidate pool is
    ``[parents, R]`` rather than ``[parents, vocab]``.  All scores are log probabilities."""

    name = "talon"

    def __init__(self, budget: int, topk: int, mu: float) -> None:
        self.budget, self.topk, self.log_mu = budget, topk, math.log(mu)

    def _grow(self, growth: Growth) -> DraftTree:
        tree = growth.tree
        proposal = growth.root()
        if self.topk == 0:
            layer = self._gated_layer(growth, proposal, [0])
        else:
            k = min(self.topk, self.budget)
            top = top_children(proposal, k)
            candidates = [c for c in growth.candidates(top, [0], *_best(top, k)) if c is not None]
            layer = self._keep(growth, candidates)
            if growth.gate is not None:
                growth.gate.append(_root_gate(top_children(proposal, k + ROOT_GATE_EXTRA), k, len(layer)))
        # A layer the cost rule trims still grows below the nodes it kept; growth ends when a layer is
        # empty (``_keep`` says why), the budget is spent, or the next layer would not pay.
        while layer and tree.num_drafts < self.budget:
            if not growth.deeper(layer):
                return tree
            if not growth.layer_pays(layer):
                growth.stop = STOP_COST
                return tree
            layer = self._gated_layer(growth, growth.expand(layer), layer)
        if layer:
            growth.stop = STOP_CAP
        return tree

    @staticmethod
    def _keep(growth: Growth, candidates: list[Candidate]) -> list[int]:
        """Attach the prefix of a layer's candidates (best first) that the cost rule affords (all, when it
        does not size); returns their node ids."""
        keep = growth.affordable(candidates)
        if not keep:
            growth.stop = STOP_COST if candidates else STOP_DRAFTER
        return [n for n in growth.attach(candidates[:keep]) if n is not None]

    def _gated_layer(self, growth: Growth, proposal: Proposal, parents: list[int]) -> list[int]:
        """Admit the gated, budget-checked children of ``parents`` from ``proposal`` (the drafter's answer
        for them: one call, made by the caller); returns the admitted node ids."""
        tree = growth.tree
        room = self.budget - tree.num_drafts
        top = top_children(proposal, room)  # [parents, R]
        scores = (_path_logprobs(tree, parents)[:, None] + top.logprobs).ravel()
        admitted = (scores >= scores.max() + self.log_mu) & np.isfinite(scores)
        # Best first, keep at most `room`; ties keep (parent order, rank) order.
        order = np.argsort(np.where(admitted, -scores, np.inf), kind="stable")[:room]
        r = top.width
        candidates = growth.candidates(top, parents, order // r, order % r, admitted[order])
        added = self._keep(growth, [c for c in candidates if c is not None])
        if growth.gate is not None:
            growth.gate.append(self._gate_layer(tree, parents, top, scores, admitted, order, len(added)))
        return added

    def _gate_layer(
        self,
        tree: DraftTree,
        parents: list[int],
        top: TopChildren,
        scores: np.ndarray,
        admitted: np.ndarray,
        order: np.ndarray,
        attached: int,
    ) -> GateLayer:
        """The layer's candidates (finite ones) with what happened to each (lab only).  ``scores`` and
        ``admitted``: ``[parents * R]`` over ``top``'s children; ``order``: the first ``room`` candidates,
        the admitted ones first and best first (``admitted[order]`` tells which are in); ``attached``:
        how many of those (best first) the cost rule kept."""
        in_room = np.zeros_like(admitted)
        in_room[order] = admitted[order]
        kept = np.zeros_like(admitted)
        kept[order[:attached]] = admitted[order[:attached]]
        finite = np.isfinite(scores)
        status = [
            ADMITTED if k else CUT_BY_COST if room else CUT_BY_BUDGET if a else BELOW_GATE
            for k, room, a, f in zip(kept.tolist(), in_room.tolist(), admitted.tolist(), finite.tolist())
            if f
        ]
        index = np.flatnonzero(finite)
        best = float(scores.max())
        return GateLayer(
            depth=tree.depth[parents[0]] + 1,
            parents=[parents[i] for i in (index // top.width).tolist()],
            tokens=top.tokens.ravel()[index].tolist(),
            path_logprobs=scores[index].tolist(),
            status=status,
            best=best,
            threshold=best + self.log_mu,
        )


ROOT_GATE_EXTRA = 10
"""Candidates past the K-th that the root layer's gate record shows (as ``beyond K``)."""


def _root_gate(top: TopChildren, k: int, attached: int) -> GateLayer:
    """The root layer's record: the root's best ``k + ROOT_GATE_EXTRA`` tokens (``top``, read with that
    many), the first ``attached`` admitted, the rest of the first ``k`` cut by the cost rule."""
    finite = [(t, lp) for t, lp in zip(top.tokens[0].tolist(), top.logprobs[0].tolist()) if lp > -math.inf]
    return GateLayer(
        depth=1,
        parents=[0] * len(finite),
        tokens=[t for t, _ in finite],
        path_logprobs=[lp for _, lp in finite],
        status=[ADMITTED if i < attached else CUT_BY_COST if i < k else BEYOND_K for i in range(len(finite))],
        best=finite[0][1] if finite else -math.inf,
        threshold=None,
    )


def _path_logprobs(tree: DraftTree, nodes: Sequence[int]) -> np.ndarray:
    """Float64 ``[len(nodes)]``: the path log-probabilities of ``nodes``."""
    return np.array([tree.path_logprob[n] for n in nodes], dtype=np.float64)


def make_builder(cfg: TreeConfig) -> TreeBuilder:
    """The builder for ``cfg.method`` (a root-only tree for plain autoregressive decoding)."""
    if cfg.method == "ar":
        return RootOnlyBuilder()
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
