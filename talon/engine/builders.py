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
from dataclasses import dataclass, field

import torch

from ..config import ConfigError, TreeConfig
from ..drafters.base import Drafter, Proposal
from ..models.device import to_device
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
        proposal: Proposal,
        frontier: Sequence[int],
        rows: torch.Tensor,
        tokens: torch.Tensor,
        logprobs: torch.Tensor,
        keep: torch.Tensor | None = None,
    ) -> list[Candidate | None]:
        """Candidates given as device tensors ``[k]``: ``tokens[j]`` as a child of ``frontier[rows[j]]``
        (``frontier`` = the nodes ``proposal`` answered for, ``[0]`` for the root) with draft
        log-probability ``logprobs[j]``, each labelled with its source; None where ``keep[j]`` (default:
        all) is False or the log-probability is not finite.  One host sync."""
        if not rows.numel():
            return []
        keep = torch.isfinite(logprobs) if keep is None else keep & torch.isfinite(logprobs)
        columns = [rows.double(), tokens.double(), logprobs.double(), keep.double()]
        if proposal.from_retrieval is not None:
            columns.append(proposal.from_retrieval[rows, tokens].double())
        values = torch.stack(columns).tolist()
        labels = values[4] if len(values) > 4 else [0.0] * len(values[0])
        out: list[Candidate | None] = []
        for r, t, lp, k, flag in zip(*values[:4], labels):
            if not k:
                out.append(None)
                continue
            source = SOURCE_RETRIEVAL if flag else proposal.source
            match = proposal.match[int(r)] if proposal.match is not None and source == SOURCE_RETRIEVAL else 0
            c = Candidate(frontier[int(r)], int(t), lp, source, match)
            c.accept = self.rule.accept(self.tree, c, self.accept)
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
        return ids

    def add(self, *args, **kwargs) -> list[int | None]:
        """``candidates`` then ``attach``: every candidate added (fixed-shape policies)."""
        return self.attach(self.candidates(*args, **kwargs))

    def affordable(self, candidates: Sequence[Candidate]) -> int:
        """How many of ``candidates`` (best first) the cost rule keeps (all when it does not size)."""
        if not self.sizing:
            return len(candidates)
        return self.rule.affordable(self.expected, len(self.tree), self.call_widths, candidates)

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


def _root_top(proposal: Proposal, k: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(rows, tokens, logprobs)`` of the root row's ``k`` best tokens, best first (device tensors)."""
    logprobs, tokens = proposal.logprobs[0].topk(min(k, proposal.logprobs.shape[-1]))
    return torch.zeros_like(tokens), tokens, logprobs


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
            added = growth.add(proposal, [node], *_root_top(proposal, 1))
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
            ranked_lp, ranked_tokens = proposal.logprobs.topk(
                min(1 + max(p[-1] for p in layer), proposal.logprobs.shape[-1]), dim=-1
            )
            layer = [p for p in layer if p[-1] < ranked_lp.shape[1]]
            device = ranked_lp.device
            rows = to_device([row_of[node_of[p[:-1]]] for p in layer], torch.long, device)
            ranks = to_device([p[-1] for p in layer], torch.long, device)
            added = growth.add(proposal, parents, rows, ranked_tokens[rows, ranks], ranked_lp[rows, ranks])
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
        frontier = [n for n in growth.add(proposal, [0], *_root_top(proposal, self.topk)) if n is not None]
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
            proposal = growth.expand(frontier)
            child_lp, tokens = proposal.logprobs.topk(min(self.topk, proposal.logprobs.shape[-1]), dim=-1)
            parent_lp = _path_logprobs(tree, frontier, child_lp.device)
            scores = (parent_lp[:, None] + child_lp.double()).flatten()  # [frontier * k]
            # Every candidate is recorded, best first; a stable sort keeps expansion order on ties.
            order = torch.argsort(-scores, stable=True)
            k = child_lp.shape[1]
            added = growth.add(proposal, frontier, order // k, tokens.flatten()[order], child_lp.flatten()[order])
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
        expected, best, best_m = 1.0, 1.0 / growth.rule.price(1, growth.call_widths), 0
        for m, node in enumerate(order, start=1):
            expected += growth.accept[node]
            ratio = expected / growth.rule.price(m + 1, growth.call_widths)
            if ratio > best:
                best, best_m = ratio, m
        return best_m


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
            candidates = [c for c in growth.candidates(proposal, [0], *_root_top(proposal, k)) if c is not None]
            layer = self._keep(growth, candidates)
            if growth.gate is not None:
                growth.gate.append(_root_gate(proposal, k, len(layer)))
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
        for them: one call, made by the caller) with one host sync; returns the admitted node ids."""
        tree = growth.tree
        logprobs = proposal.logprobs  # [parents, vocab]
        room = self.budget - tree.num_drafts
        child_lp, tokens = logprobs.topk(min(room, logprobs.shape[1]), dim=1)  # [parents, R]
        scores = (_path_logprobs(tree, parents, logprobs.device)[:, None] + child_lp.double()).flatten()
        admitted = (scores >= scores.max() + self.log_mu) & torch.isfinite(scores)
        # Best first, keep at most `room`; ties keep (parent order, rank) order.
        order = torch.argsort(torch.where(admitted, -scores, math.inf), stable=True)[:room]
        r = child_lp.shape[1]
        candidates = growth.candidates(
            proposal, parents, order // r, tokens.flatten()[order], child_lp.flatten()[order], admitted[order]
        )
        added = self._keep(growth, [c for c in candidates if c is not None])
        if growth.gate is not None:
            growth.gate.append(self._gate_layer(tree, parents, tokens, scores, admitted, order, r, len(added)))
        return added

    def _gate_layer(
        self,
        tree: DraftTree,
        parents: list[int],
        tokens: torch.Tensor,
        scores: torch.Tensor,
        admitted: torch.Tensor,
        order: torch.Tensor,
        r: int,
        attached: int,
    ) -> GateLayer:
        """The layer's candidates (finite ones) with what happened to each (lab only: one more read-back).
        ``attached``: how many of the admitted candidates (best first) the cost rule kept."""
        in_room = torch.zeros_like(admitted)
        in_room[order] = admitted[order]
        kept = torch.zeros_like(admitted)
        kept[order[:attached]] = admitted[order[:attached]]
        finite = torch.isfinite(scores)
        status = [
            ADMITTED if k else CUT_BY_COST if room else CUT_BY_BUDGET if a else BELOW_GATE
            for k, room, a, f in zip(kept.tolist(), in_room.tolist(), admitted.tolist(), finite.tolist())
            if f
        ]
        index = torch.nonzero(finite).flatten()
        best = float(scores.max())
        return GateLayer(
            depth=tree.depth[parents[0]] + 1,
            parents=[parents[i] for i in (index // r).tolist()],
            tokens=tokens.flatten()[index].tolist(),
            path_logprobs=scores[index].tolist(),
            status=status,
            best=best,
            threshold=best + self.log_mu,
        )


ROOT_GATE_EXTRA = 10
"""Candidates past the K-th that the root layer's gate record shows (as ``beyond K``)."""


def _root_gate(proposal: Proposal, k: int, attached: int) -> GateLayer:
    """The root layer's record: the root's best ``k + ROOT_GATE_EXTRA`` tokens, the first ``attached``
    admitted, the rest of the first ``k`` cut by the cost rule."""
    logprobs, tokens = proposal.logprobs[0].topk(min(k + ROOT_GATE_EXTRA, proposal.logprobs.shape[-1]))
    finite = [(t, lp) for t, lp in zip(tokens.tolist(), logprobs.tolist()) if lp > -math.inf]
    return GateLayer(
        depth=1,
        parents=[0] * len(finite),
        tokens=[t for t, _ in finite],
        path_logprobs=[lp for _, lp in finite],
        status=[ADMITTED if i < attached else CUT_BY_COST if i < k else BEYOND_K for i in range(len(finite))],
        best=finite[0][1] if finite else -math.inf,
        threshold=None,
    )


def _path_logprobs(tree: DraftTree, nodes: Sequence[int], device: torch.device) -> torch.Tensor:
    """Float64 ``[len(nodes)]``: the path log-probabilities of ``nodes`` on ``device``."""
    return to_device([tree.path_logprob[n] for n in nodes], torch.float64, device)


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
