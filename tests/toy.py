"""Model-free stand-ins for the unit tests: a drafter driven by a function of the context, a few
families of such functions, and a toy second-order Markov "target" given as a conditional table.

Contexts are token tuples.  For a tree node, the drafter's context is the committed prefix (everything
before the root), then the root token, then the draft tokens along the path down to the node.
"""

from __future__ import annotations

import math
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from talon.drafters.base import Drafter, Proposal
from talon.tree import DraftTree

Context = tuple[int, ...]
LogprobFn = Callable[[Context], torch.Tensor]


def node_path(tree: DraftTree, node: int) -> list[int]:
    """Node indices from the root (included) down to ``node``, by an independent parent walk."""
    path = [node]
    while tree.parent[path[-1]] != -1:
        path.append(tree.parent[path[-1]])
    return path[::-1]


def node_tokens(tree: DraftTree, node: int) -> Context:
    """Tokens from the root (included) down to ``node``."""
    return tuple(tree.token[i] for i in node_path(tree, node))


@dataclass
class ProposeCall:
    """One recorded ``Drafter.propose`` call."""

    frontier: list[int]
    size: int
    """``len(tree)`` when the call was made."""
    tree: DraftTree
    """The tree object the builder was growing (a live reference: it keeps growing after the call)."""


class TableDrafter(Drafter):
    """A drafter whose next-token log-probabilities are ``fn(context)``.

    It keeps the committed sequence it is handed (``start`` / ``begin_step``) and records every
    ``propose`` call (``calls``) so tests can count forwards and check what each layer was grown from."""

    name = "table"
    can_draft_ahead = True

    def __init__(self, vocab_size: int, fn: LogprobFn) -> None:
        self.vocab_size = vocab_size
        self.fn = fn
        self._seq: list[int] = []
        self.calls: list[ProposeCall] = []

    def start(
        self, prompt_ids: Sequence[int], target_features: torch.Tensor | None = None, rows: int | None = None
    ) -> None:
        self._seq = [int(t) for t in prompt_ids]
        self.calls = []

    def context(self, tree: DraftTree, node: int) -> Context:
        """The drafter's context for ``node``: committed prefix before the root + root-to-node tokens."""
        if self._seq:
            assert self._seq[-1] == tree.token[0], "tree root must be the last committed token"
        return tuple(self._seq[:-1]) + node_tokens(tree, node)

    def begin_step(self, committed_ids: Sequence[int], target_features: torch.Tensor | None = None) -> Proposal:
        self._seq = [int(t) for t in committed_ids]
        return self.propose(DraftTree.with_root(self._seq[-1]), [0])

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        self.calls.append(ProposeCall(list(frontier), len(tree), tree))
        rows = [self.fn(self.context(tree, node)).to(torch.float32) for node in frontier]
        out = torch.stack(rows) if rows else torch.empty(0, self.vocab_size)
        assert out.shape == (len(frontier), self.vocab_size)
        return Proposal(out)


# ---- families of drafter functions ------------------------------------------------------------------
def _seed(tag: int, context: Context) -> int:
    """A stable 31-bit seed from ``tag`` and ``context`` (independent of PYTHONHASHSEED)."""
    return zlib.crc32(repr((tag, tuple(context))).encode()) & 0x7FFFFFFF


def random_fn(vocab: int, tag: int = 0, scale: tuple[float, float] = (0.5, 4.0)) -> LogprobFn:
    """Random but deterministic full-support distributions seeded by the context.  The logit scale is
    itself drawn per context from ``scale`` so flat and peaked rows both occur."""

    def fn(context: Context) -> torch.Tensor:
        g = torch.Generator().manual_seed(_seed(tag, context))
        s = scale[0] + (scale[1] - scale[0]) * torch.rand((), generator=g, dtype=torch.float64)
        logits = torch.randn(vocab, generator=g, dtype=torch.float64) * s
        return torch.log_softmax(logits, dim=-1).to(torch.float32)

    return fn


def sparse_random_fn(vocab: int, finite: int, tag: int = 0) -> LogprobFn:
    """Like ``random_fn`` but only ``finite`` tokens (chosen per context) get a finite log-probability."""

    def fn(context: Context) -> torch.Tensor:
        g = torch.Generator().manual_seed(_seed(tag, context))
        keep = torch.randperm(vocab, generator=g)[:finite]
        logits = torch.full((vocab,), -math.inf, dtype=torch.float64)
        logits[keep] = torch.randn(finite, generator=g, dtype=torch.float64) * 2.0
        return torch.log_softmax(logits, dim=-1).to(torch.float32)

    return fn


def uniform_fn(vocab: int) -> LogprobFn:
    """The uniform distribution everywhere."""
    row = torch.full((vocab,), -math.log(vocab), dtype=torch.float32)
    return lambda context: row.clone()


def one_hot_fn(vocab: int, eps: float = 0.0, pick: Callable[[Context], int] | None = None) -> LogprobFn:
    """Mass ``1 - eps`` on ``pick(context)`` (default: last token + 1 mod vocab), ``eps`` spread evenly
    over the rest; ``eps == 0`` gives a strict one-hot (every other token ``-inf``)."""
    pick = pick or (lambda c: (c[-1] + 1) % vocab)

    def fn(context: Context) -> torch.Tensor:
        probs = torch.full((vocab,), eps / (vocab - 1), dtype=torch.float64)
        probs[pick(context)] = 1.0 - eps
        return torch.log(probs).to(torch.float32)

    return fn


def table_fn(table: torch.Tensor) -> LogprobFn:
    """Log of a conditional table: ``table[last token]`` (first order) or ``table[prev, last]``
    (second order) is the next-token distribution."""
    logt = torch.log(table.to(torch.float64)).to(torch.float32)

    def fn(context: Context) -> torch.Tensor:
        if table.dim() == 2:
            return logt[context[-1]].clone()
        prev = context[-2] if len(context) >= 2 else context[-1]
        return logt[prev, context[-1]].clone()

    return fn


# ---- the toy target ---------------------------------------------------------------------------------
class MarkovTarget:
    """A second-order Markov "model": ``P[a, b]`` is the next-token distribution after ``..., a, b``.
    A context of one token ``(b,)`` uses ``P[b, b]``."""

    def __init__(self, table: torch.Tensor) -> None:
        assert table.dim() == 3 and table.shape[0] == table.shape[1] == table.shape[2]
        assert torch.allclose(table.sum(-1), torch.ones(()).double(), atol=1e-12)
        self.P = table.to(torch.float64)
        self.vocab = table.shape[-1]

    def next_probs(self, context: Context) -> torch.Tensor:
        prev = context[-2] if len(context) >= 2 else context[-1]
        return self.P[prev, context[-1]]

    def tree_probs(self, tree: DraftTree, prefix: Context) -> torch.Tensor:
        """``[len(tree), vocab]``: row i is the target's distribution after node i, given the committed
        ``prefix`` before the root."""
        return torch.stack([self.next_probs(tuple(prefix) + node_tokens(tree, i)) for i in range(len(tree))])

    def joint(self, prompt: Context, length: int) -> torch.Tensor:
        """Exact joint distribution of the next ``length`` tokens after ``prompt``, shape ``[vocab]*length``."""
        out = torch.zeros((self.vocab,) * length, dtype=torch.float64)

        def walk(context: Context, prob: float, prefix: tuple[int, ...]) -> None:
            if len(prefix) == length:
                out[prefix] = prob
                return
            p = self.next_probs(context)
            for t in range(self.vocab):
                if p[t] > 0:
                    walk(context + (t,), prob * float(p[t]), prefix + (t,))

        walk(tuple(prompt), 1.0, ())
        return out


def toy_target_table(vocab: int = 4, seed: int = 1) -> torch.Tensor:
    """A fixed second-order table with varied, mostly non-negligible entries and one structural zero
    per row whose last token is 2 (token 3 never follows 2), so drafts of impossible tokens occur."""
    g = torch.Generator().manual_seed(seed)
    table = torch.rand(vocab, vocab, vocab, generator=g, dtype=torch.float64) + 0.25
    table[:, 2, 3] = 0.0
    return table / table.sum(-1, keepdim=True)
