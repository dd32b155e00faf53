"""Tree verification: one target forward over the flattened tree, then the acceptance walk.

At each visited node the target picks its token (the argmax at temperature 0; at temperature > 0 the
argmax of the tempered logits plus position-keyed Gumbel noise, ``talon.engine.sampling``), and the walk
descends into the child holding that token; the first node without such a child gives the bonus token.

The target's LM head runs only on the rows acceptance needs: the internal nodes (every visited node
but the last is one) and, when the walk ends at a leaf, that leaf.  The head's weights are read once
per call whatever the row count, so a second call for a leaf costs far more than a few more rows in the
first: a tree with few leaves gets every leaf's row in the one call (``LEAVES_WITH_INTERNAL``), and a
tree with more gets the leaves the walk is likely to end at, those whose draft path probability is at
least ``LEAF_HEAD_PROB``.  On a CPU with native bfloat16 linears the head scores a few rows in
bfloat16 and recomputes in float32 only the tokens that could be the answer
(``talon.models.lm_head``), so the token picked is still the float32 argmax.
``greedy_accept`` and ``sampling_accept`` are the same walk as pure functions of full per-node logits:
the tests' reference for the verifier, and (``sampling_accept``) the lab's re-rolls.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import torch

from ..models.device import to_device
from ..models.lm_head import FullScores, RowScores
from ..models.loaded import LoadedModel
from ..runtime.kv_cache import CachedLM
from ..runtime.rows import GrowingRows
from ..tree import ACCEPTED, NO_TOKEN, NOT_REACHED, REJECTED, ROOT, DraftTree, Verdict
from .sampling import PositionNoise

LEAVES_WITH_INTERNAL = 4
"""A tree with at most this many leaves runs the LM head on every row in one call.  The head is a
[vocab, H] matrix read once per call: on the 2-core CPU (SmolLM2-135M, vocab 49,152) a call took
4.3 ms at 1 row and about 0.36 ms more per extra row, so a walk that ends at a leaf (an accepted chain
does) saves a call's 4 ms for a few rows' 1-2 ms."""
LEAF_HEAD_PROB = 0.05
"""In a tree with more leaves, a leaf whose draft path probability (``exp(path_logprob)``) is at least
this gets its row in the one LM head call.  The walk ends at a leaf only when the target accepts the
whole path to it, which happens about as often as the path's draft probability says (the head is close
to calibrated along paths), so heading the leaf pays when that probability times a call's cost exceeds
one row's cost: 0.16-0.25 ms a row against 4.6 ms a call on the 2-core AVX-512 machine, 0.36 against 4.3
on the AVX2 one.  In the headline suite's TALON and hybrid auto runs 605 of 1,110 trees with more than
four leaves ended at a leaf; heading the leaves above 0.05 took 3.3 more rows a tree and left 117 of
those 605 walks a second call (docs/benchmarks.md, "Cheaper verification")."""


def walk(tree: DraftTree, choice: Callable[[int], int]) -> tuple[list[str], list[int], int, list[int]]:
    """Descend from the root: at node u the target's token is ``choice(u)``; descend into the child
    holding it, else that token is the bonus.  Returns ``(status, accepted_path, bonus, target_token)``."""
    kids = tree.children_lists()
    status = [ROOT] + [NOT_REACHED] * (len(tree) - 1)
    target_token = [NO_TOKEN] * len(tree)
    path = [0]
    while True:
        node = path[-1]
        want = choice(node)
        target_token[node] = want
        nxt = None
        for child in kids[node]:  # the target's token is known: every other child is refused
            if nxt is None and tree.token[child] == want:
                nxt = child
                status[child] = ACCEPTED
            else:
                status[child] = REJECTED
        if nxt is None:
            return status, path, want, target_token
        path.append(nxt)


def node_token_probs(tree: DraftTree, scores: RowScores, parent_rows: Sequence[int], temperature: float) -> list[float]:
    """Per node, the target's probability of its token given its parent's context (1.0 for the root).
    ``scores``: the target's scores of some rows (screened, or ``FullScores`` over float logits);
    ``parent_rows[k]``: the row after node k + 1's parent (``len(tree) - 1`` entries); tempered by
    ``temperature`` when > 0 (untempered at 0)."""
    if len(tree) == 1:
        return [1.0]
    return [1.0] + scores.token_probs(parent_rows, tree.token[1:], temperature).tolist()


def greedy_accept(tree: DraftTree, logits: torch.Tensor) -> Verdict:
    """The greedy walk over full logits ``[len(tree), vocab]`` (row i = the target after node i)."""
    scores = FullScores(logits)
    status, path, bonus, target_token = walk(tree, scores.pick(0.0, None).__getitem__)
    probs = node_token_probs(tree, scores, tree.parent[1:], 0.0)
    return Verdict(status, path, bonus, target_token, probs)


def sampling_accept(tree: DraftTree, logits: torch.Tensor, temperature: float, noise: torch.Tensor) -> Verdict:
    """The sampling walk over full logits ``[len(tree), vocab]``: at node i the target's token is
    ``argmax(logits[i] / temperature + noise[depth[i]])``; ``noise``: Gumbel rows ``[max_depth + 1,
    vocab]``, row d for the output position of the nodes at depth d."""
    scores = FullScores(logits)
    choices = scores.pick(temperature, noise[torch.tensor(tree.depth, device=noise.device)])
    status, path, bonus, target_token = walk(tree, choices.__getitem__)
    probs = node_token_probs(tree, scores, tree.parent[1:], temperature)
    return Verdict(status, path, bonus, target_token, probs)


def logit_nodes(tree: DraftTree) -> list[int]:
    """The nodes whose logits verification computes in its one LM head call, in tree order: every node
    when the tree has at most ``LEAVES_WITH_INTERNAL`` leaves, else the internal ones and the leaves
    whose draft path probability is at least ``LEAF_HEAD_PROB``."""
    kids = tree.children_lists()
    leaves = sum(1 for k in kids if not k)
    if leaves <= LEAVES_WITH_INTERNAL:
        return list(range(len(tree)))
    likely = math.log(LEAF_HEAD_PROB)
    return [i for i in range(len(tree)) if kids[i] or tree.path_logprob[i] >= likely]


class Verifier:
    """Runs the target over each step's tree on its own KV cache (prefix + accepted path only).

    ``hidden_layers``: target hidden states to collect for a feature-level drafter (see ``CachedLM``);
    ``features`` is their log, one row per committed position.  ``rows``: the most rows the run holds,
    to verify on a static runner (CUDA graphs); ``close`` gives it back."""

    def __init__(self, target: LoadedModel, hidden_layers: Sequence[int] = (), rows: int | None = None) -> None:
        self.target = target
        self.cached = CachedLM(target, hidden_layers, rows)
        self._log: GrowingRows | None = None  # [positions, layers, H]
        self._tree_features: torch.Tensor | None = None  # the last verified tree's, [nodes, layers, H]

    def close(self) -> None:
        """Give back the static runner, if any (the verifier must not be used afterwards)."""
        self.cached.release()

    @property
    def root_position(self) -> int:
        """Position of the next tree's root (= committed tokens before it)."""
        return self.cached.committed_len

    @property
    def features(self) -> torch.Tensor | None:
        """The target's states at every committed position before the root, ``[root_position, layers,
        H]`` (a view of the log: later steps append past it), or None if none are collected."""
        return self._log.view() if self._log is not None else None

    def _record(self, features: torch.Tensor | None) -> None:
        if features is None:
            return
        if self._log is None:
            self._log = GrowingRows(tuple(features.shape[1:]), features.dtype, features.device)
        self._log.append(features)

    def prefill(self, prompt_ids: Sequence[int]) -> None:
        """Feed every prompt token but the last, which becomes the first root (no logits: nothing is
        predicted from the prompt's inside)."""
        if len(prompt_ids) > 1:
            self._record(self.cached.extend_committed(prompt_ids[:-1], logit_rows=None).features)

    def verify(self, tree: DraftTree, temperature: float, noise: PositionNoise | None = None) -> Verdict:
        """One target forward over the whole tree (root included), the LM head on the internal rows
        (on every row when the tree has few leaves), the walk, and the leaf's row if the walk ends at a
        leaf whose row was left out.  ``noise`` is needed at temperature > 0.  The tree's rows stay in the
        cache until ``commit`` (or ``drop_tree``)."""
        root_position = self.root_position
        out = self.cached.forward_nodes(tree, range(len(tree)), root_position, logit_rows=None)
        self._tree_features = out.features
        headed = logit_nodes(tree)
        index = {node: k for k, node in enumerate(headed)}
        rows = to_device(headed, torch.long, out.hidden.device)
        scores = self.cached.scores(out.hidden.index_select(0, rows))

        def noise_for(nodes: list[int]) -> torch.Tensor | None:
            return noise.rows([root_position + tree.depth[n] for n in nodes]) if temperature > 0 else None

        choices = scores.pick(temperature, noise_for(headed))

        def choice(node: int) -> int:
            if node in index:
                return choices[index[node]]
            return self.cached.scores(out.hidden[node : node + 1]).pick(temperature, noise_for([node]))[0]

        status, path, bonus, target_token = walk(tree, choice)
        probs = node_token_probs(tree, scores, [index[p] for p in tree.parent[1:]], temperature)
        return Verdict(status, path, bonus, target_token, probs)

    def commit(self, accepted_path: Sequence[int]) -> None:
        """Keep the KV rows of the accepted path (root included); the bonus token is the next root.  The
        path's hidden states join ``features``."""
        self.cached.commit_nodes(accepted_path)
        if self._tree_features is not None:
            self._record(self._tree_features[list(accepted_path)])
        self._tree_features = None

    def drop_tree(self) -> None:
        """Forget the last verified tree's rows (the tree lab verifies many trees at one context)."""
        self.cached.drop_tree()
        self._tree_features = None

    def node_logits(self, tree: DraftTree) -> torch.Tensor:
        """The target's next-token logits after every node of ``tree``, ``[len(tree), vocab]`` (one
        forward at the current root; the tree's rows are dropped again)."""
        out = self.cached.forward_nodes(tree, range(len(tree)), self.root_position, logit_rows="all")
        self.drop_tree()
        return out.logits
