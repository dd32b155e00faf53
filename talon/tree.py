"""The draft tree: flat arrays with node 0 as the root, the target's verdict on it, and the gate's record.

Torch-free on purpose (``viz`` reads trees without torch).  Conventions:

* node 0 is the root: the last committed token, not a draft; it has ``parent == -1`` and depth 0;
* the first draft layer has depth 1;
* parents always come before their children;
* ``draft_logprob[i]`` is the drafter's log-probability of ``token[i]`` given the path to its parent
  (0.0 for the root) and ``path_logprob[i]`` is the sum along the path from the root.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

SOURCE_MODEL = "model"
SOURCE_RETRIEVAL = "retrieval"

# Verdict of each node after verification (``Verdict.status``).
ROOT, ACCEPTED, REJECTED, NOT_REACHED = "root", "accepted", "rejected", "not reached"
NO_TOKEN = -1
"""``Verdict.target_token`` of a node the target did not visit."""


def children_lists(parent: Sequence[int]) -> list[list[int]]:
    """Children of each node in index order, from a parent array (``parent[0] == -1``, every other
    ``parent[i] < i``; raises ``ValueError`` otherwise)."""
    kids: list[list[int]] = [[] for _ in parent]
    for i, p in enumerate(parent):
        if i == 0:
            if p != -1:
                raise ValueError("node 0 must be the root (parent -1)")
            continue
        if not 0 <= p < i:
            raise ValueError(f"node {i}: parent {p} does not come before it")
        kids[p].append(i)
    return kids


@dataclass
class DraftTree:
    token: list[int]
    parent: list[int]
    depth: list[int]
    draft_logprob: list[float]
    path_logprob: list[float]
    source: list[str] = field(default_factory=list)
    match: list[int] = field(default_factory=list)
    """Per node, for a retrieval draft the length of the n-gram its proposal matched (what prompt
    lookup's acceptance depends on); 0 for model drafts and the root.  Filled with zeros when not given."""

    def __post_init__(self) -> None:
        if not self.match:
            self.match = [0] * len(self.token)

    @classmethod
    def with_root(cls, root_token: int) -> DraftTree:
        """A tree holding only the root (the pending committed token)."""
        return cls([int(root_token)], [-1], [0], [0.0], [0.0], [SOURCE_MODEL], [0])

    def __len__(self) -> int:
        """Number of nodes, root included."""
        return len(self.token)

    @property
    def num_drafts(self) -> int:
        """Number of draft nodes, root excluded (what the budget N counts)."""
        return len(self.token) - 1

    @property
    def max_depth(self) -> int:
        """Depth of the deepest node (0 for a root-only tree)."""
        return max(self.depth)

    def add(self, parent: int, token: int, logprob: float, source: str = SOURCE_MODEL, match: int = 0) -> int:
        """Append a child of ``parent``; returns the new node's index."""
        if not 0 <= parent < len(self.token):
            raise ValueError(f"parent {parent} is not a node of this tree")
        self.token.append(int(token))
        self.parent.append(int(parent))
        self.depth.append(self.depth[parent] + 1)
        self.draft_logprob.append(float(logprob))
        self.path_logprob.append(self.path_logprob[parent] + float(logprob))
        self.source.append(source)
        self.match.append(int(match))
        return len(self.token) - 1

    def children(self, node: int) -> list[int]:
        """Indices of ``node``'s children in tree order."""
        return [i for i, p in enumerate(self.parent) if p == node]

    def children_lists(self) -> list[list[int]]:
        """``kids[i]``: node i's children in tree order, for every node."""
        return children_lists(self.parent)

    def path_to(self, node: int) -> list[int]:
        """Node ids from the root down to ``node`` (both included)."""
        path = [node]
        while self.parent[path[-1]] != -1:
            path.append(self.parent[path[-1]])
        return path[::-1]

    def path_tokens(self, node: int) -> list[int]:
        """Tokens of the drafts from the root (excluded) down to ``node`` (included)."""
        return [self.token[n] for n in self.path_to(node)[1:]]

    def layer_widths(self) -> list[int]:
        """``widths[d]`` = number of nodes at depth d (``widths[0] == 1``, the root)."""
        widths = [0] * (self.max_depth + 1)
        for d in self.depth:
            widths[d] += 1
        return widths

    @property
    def widest_layer(self) -> int:
        """The most draft nodes at one depth (root excluded; 0 for a root-only tree)."""
        return max(self.layer_widths()[1:], default=0)

    def subset(self, keep: list[int]) -> DraftTree:
        """The tree restricted to ``keep`` (must contain 0 and be closed under parents), renumbered
        in ``keep``'s order, which must put parents before children."""
        if not keep or keep[0] != 0:
            raise ValueError("the root must be kept first")
        index = {old: new for new, old in enumerate(keep)}
        if len(index) != len(keep):
            raise ValueError("a node is kept twice")
        parent = []
        for old in keep:
            p = self.parent[old]
            if p != -1 and p not in index:
                raise ValueError(f"node {old} kept without its parent {p}")
            if p != -1 and index[p] >= index[old]:
                raise ValueError("kept order must put parents before children")
            parent.append(-1 if p == -1 else index[p])
        pick = lambda arr: [arr[i] for i in keep]  # noqa: E731
        return DraftTree(
            pick(self.token),
            parent,
            pick(self.depth),
            pick(self.draft_logprob),
            pick(self.path_logprob),
            pick(self.source),
            pick(self.match),
        )

    def validate(self) -> None:
        """Raise ``ValueError`` if the arrays break the contract in the module docstring."""
        n = len(self.token)
        arrays = (self.parent, self.depth, self.draft_logprob, self.path_logprob, self.source, self.match)
        if n == 0 or any(len(a) != n for a in arrays):
            raise ValueError("tree arrays are empty or differ in length")
        if self.parent[0] != -1 or self.depth[0] != 0:
            raise ValueError("node 0 must be the root")
        for i in range(1, n):
            p = self.parent[i]
            if not 0 <= p < i:
                raise ValueError(f"node {i}: parent {p} does not come before it")
            if self.depth[i] != self.depth[p] + 1:
                raise ValueError(f"node {i}: depth is not parent's depth + 1")

    def to_dict(self) -> dict:
        return {
            "token": self.token,
            "parent": self.parent,
            "depth": self.depth,
            "draft_logprob": self.draft_logprob,
            "path_logprob": self.path_logprob,
            "source": self.source,
            "match": self.match,
        }

    @classmethod
    def from_dict(cls, d: dict) -> DraftTree:
        """The tree of ``to_dict``; ``ValueError`` if the arrays break the contract (a hand-edited file)."""
        tree = cls(
            list(d["token"]),
            list(d["parent"]),
            list(d["depth"]),
            list(d["draft_logprob"]),
            list(d["path_logprob"]),
            list(d["source"]),
            list(d.get("match") or []),
        )
        tree.validate()
        return tree


@dataclass
class Verdict:
    """What the target made of one tree (``talon.engine.verify``).

    Attributes:
        status: per node: ``root``, ``accepted``, ``rejected`` (a child of a visited node that the
            target tested and refused) or ``not reached``.
        accepted_path: node ids from the root (included) to the deepest accepted node.
        bonus_token: the target's own token after the accepted path.
        target_token: per node, the token the target chose after it (``NO_TOKEN`` where not
            visited); at the last path node this is the bonus token.
        target_prob: per node, the target's probability of the node's token given its parent's
            context (1.0 for the root); at temperature 0 taken from the untempered softmax.
    """

    status: list[str]
    accepted_path: list[int]
    bonus_token: int
    target_token: list[int]
    target_prob: list[float]

    @property
    def accepted_tokens(self) -> int:
        """Draft tokens accepted (root excluded) = depth of the deepest accepted draft."""
        return len(self.accepted_path) - 1


# Why a tree stopped growing (``StepRecord.stop``).
STOP_PLAIN, STOP_CAP, STOP_COST, STOP_DEPTH, STOP_DRAFTER = "plain", "cap", "cost", "depth", "drafter"
STOP_END = "end"
STOP_REASONS = {
    STOP_PLAIN: "plain decoding: no drafts asked for",
    STOP_CAP: "the budget N was used up",
    STOP_COST: "the cost rule: another node or layer would not pay for its price on this device",
    STOP_DEPTH: "the method's depth (layers) or fixed shape was reached",
    STOP_DRAFTER: "the drafter proposed nothing more",
    STOP_END: "the run's end: a deeper draft could not be committed before the max new tokens",
}
"""Stop reason -> what it means.  TALON's gate never ends growth (a layer's best candidate always passes
it); it decides how wide each layer is."""

# Status of a candidate in a TALON layer (``GateLayer.status``).
ADMITTED, BELOW_GATE, CUT_BY_BUDGET, BEYOND_K = "admitted", "below the gate", "cut by the budget", "beyond K"
CUT_BY_COST = "cut by the cost rule"


@dataclass
class GateLayer:
    """What TALON's gate saw in one layer: every candidate it weighed (each parent's best children
    by path probability, the exact pool of Algorithm 2's shortcut), the layer's best path log-probability
    and the gate's threshold ``log(mu) + best``.  For a Top-K root layer (K >= 1, no gate) ``threshold``
    is None and candidates past the K-th are ``beyond K``; with K=0 the root layer is gated like the rest.

    Attributes:
        depth: the layer's depth (1 = the root's children).
        parents / tokens / path_logprobs / status: per candidate; ``parents`` are node ids of the tree,
            ``status`` one of ``ADMITTED``, ``BELOW_GATE``, ``CUT_BY_BUDGET``, ``CUT_BY_COST``, ``BEYOND_K``.
        best: the largest candidate path log-probability.
        threshold: ``log(mu) + best`` (None for a Top-K root layer).
    """

    depth: int
    parents: list[int]
    tokens: list[int]
    path_logprobs: list[float]
    status: list[str]
    best: float
    threshold: float | None

    def to_dict(self) -> dict:
        return {k: getattr(self, k) for k in self.__dataclass_fields__}

    @classmethod
    def from_dict(cls, d: dict) -> GateLayer:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__})
