"""Tree verification: one target forward over the flattened tree, then the acceptance walk.

At each visited node the target picks its token (the argmax at temperature 0; at temperature > 0 the
argmax of the tempered logits plus position-keyed Gumbel noise, ``talon.engine.sampling``), and the walk
descends into the child holding that token; the first node without such a child gives the bonus token.

The target's LM head runs only on the rows acceptance needs: the internal nodes (every visited node
but the last is one) and, when the walk ends at a leaf, that leaf.  ``greedy_accept`` and
``sampling_accept`` are the same walk as pure functions of full per-node logits, for tests and the lab.
"""
from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..models.device import to_device
from ..models.loaded import LoadedModel
from ..tree import ACCEPTED, NO_TOKEN, NOT_REACHED, REJECTED, ROOT, DraftTree, Verdict
from .kv_cache import CachedLM
from .sampling import PositionNoise


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


def node_token_probs(tree: DraftTree, parent_logits: torch.Tensor, temperature: float) -> list[float]:
    """Per node, the target's probability of its token given its parent's context (1.0 for the root).
    ``parent_logits``: float ``[len(tree) - 1, vocab]``, row k = logits after node k + 1's parent;
    tempered by ``temperature`` when > 0 (untempered at 0)."""
    if len(tree) == 1:
        return [1.0]
    scores = parent_logits / temperature if temperature > 0 else parent_logits
    tokens = torch.tensor(tree.token[1:], device=scores.device)
    picked = scores.gather(1, tokens[:, None])[:, 0] - torch.logsumexp(scores, dim=-1)
    return [1.0] + picked.exp().tolist()


def greedy_accept(tree: DraftTree, logits: torch.Tensor) -> Verdict:
    """The greedy walk over full logits ``[len(tree), vocab]`` (row i = the target after node i)."""
    choices = logits.argmax(dim=-1).tolist()
    status, path, bonus, target_token = walk(tree, choices.__getitem__)
    probs = node_token_probs(tree, logits[tree.parent[1:]], 0.0)
    return Verdict(status, path, bonus, target_token, probs)


def sampling_accept(tree: DraftTree, logits: torch.Tensor, temperature: float, noise: torch.Tensor) -> Verdict:
    """The sampling walk over full logits ``[len(tree), vocab]``: at node i the target's token is
    ``argmax(logits[i] / temperature + noise[depth[i]])``; ``noise``: Gumbel rows ``[max_depth + 1,
    vocab]``, row d for the output position of the nodes at depth d."""
    scores = logits / temperature + noise[torch.tensor(tree.depth, device=noise.device)]
    choices = scores.argmax(dim=-1).tolist()
    status, path, bonus, target_token = walk(tree, choices.__getitem__)
    probs = node_token_probs(tree, logits[tree.parent[1:]], temperature)
    return Verdict(status, path, bonus, target_token, probs)


@dataclass
class Checked:
    """A verified tree, before its details are worked out (``Verifier.verdict``)."""

    tree: DraftTree
    status: list[str]
    accepted_path: list[int]
    bonus_token: int
    target_token: list[int]
    internal: list[int]
    internal_logits: torch.Tensor  # float32 [len(internal), vocab]
    temperature: float


class Verifier:
    """Runs the target over each step's tree on its own KV cache (prefix + accepted path only).

    ``hidden_layers``: target hidden states to collect for a feature-level drafter (see
    ``CachedLM``); ``prefill`` and ``commit`` return them for the positions they commit.  ``rows``:
    the most rows the run holds, to verify on a static runner (CUDA graphs); ``close`` gives it back."""

    def __init__(self, target: LoadedModel, hidden_layers: Sequence[int] = (), rows: int | None = None) -> None:
        self.target = target
        self.cached = CachedLM(target, hidden_layers, rows)
        self._features: torch.Tensor | None = None

    def close(self) -> None:
        """Give back the static runner, if any (the verifier must not be used afterwards)."""
        self.cached.release()

    @property
    def root_position(self) -> int:
        """Position of the next tree's root (= committed tokens before it)."""
        return self.cached.committed_len

    def prefill(self, prompt_ids: Sequence[int]) -> torch.Tensor | None:
        """Feed every prompt token but the last, which becomes the first root (no logits: nothing is
        predicted from the prompt's inside).  Returns the hidden states of the fed positions
        ``[len(prompt_ids) - 1, layers, H]`` (None if none requested)."""
        if len(prompt_ids) <= 1:
            return None
        return self.cached.extend_committed(prompt_ids[:-1], logit_rows=None).features

    def verify(self, tree: DraftTree, temperature: float, noise: PositionNoise | None = None) -> Checked:
        """One target forward over the whole tree (root included), the LM head on the internal rows,
        the walk, and the leaf's row if the walk ends at one.  ``noise`` is needed at temperature > 0."""
        root_position = self.root_position
        out = self.cached.forward_nodes(tree, range(len(tree)), root_position, logit_rows=None)
        self._features = out.features
        kids = tree.children_lists()
        internal = [i for i in range(len(tree)) if kids[i]]
        index = {node: k for k, node in enumerate(internal)}
        rows = to_device(internal, torch.long, out.hidden.device)
        internal_logits = self.cached.logits(out.hidden.index_select(0, rows)) if internal else out.hidden.new_zeros(0, 0)

        def scores(logits: torch.Tensor, nodes: list[int]) -> torch.Tensor:
            if temperature == 0:
                return logits
            return logits / temperature + noise.rows([root_position + tree.depth[n] for n in nodes])

        choices = scores(internal_logits, internal).argmax(dim=-1).tolist() if internal else []

        def choice(node: int) -> int:
            if node in index:
                return choices[index[node]]
            leaf = self.cached.logits(out.hidden[node:node + 1])
            return int(scores(leaf, [node]).argmax(dim=-1)[0])

        status, path, bonus, target_token = walk(tree, choice)
        return Checked(tree, status, path, bonus, target_token, internal, internal_logits, temperature)

    def verdict(self, checked: Checked) -> Verdict:
        """The ``Verdict`` with the target's probability of every node's token, from the internal rows
        already computed (for the viz; not part of acceptance)."""
        tree = checked.tree
        if len(tree) == 1:
            probs = [1.0]
        else:
            row = {node: k for k, node in enumerate(checked.internal)}
            parents = torch.tensor([row[p] for p in tree.parent[1:]], device=checked.internal_logits.device)
            probs = node_token_probs(tree, checked.internal_logits[parents], checked.temperature)
        return Verdict(checked.status, checked.accepted_path, checked.bonus_token, checked.target_token, probs)

    def commit(self, accepted_path: Sequence[int]) -> torch.Tensor | None:
        """Keep the KV rows of the accepted path (root included); the bonus token is the next root.
        Returns the path's hidden states ``[len(path), layers, H]`` (None if none requested)."""
        self.cached.commit_nodes(accepted_path)
        if self._features is None:
            return None
        return self._features[list(accepted_path)]
