"""Tree verification: one target forward over the flattened tree, then an acceptance rule.

``greedy_accept`` and ``sampling_accept`` are pure functions of the tree and the target's per-node
distributions, so they are tested on toy distributions; ``Verifier`` runs the target model.
"""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..models.loaded import LoadedModel
from ..tree import ACCEPTED, NO_TOKEN, NOT_REACHED, REJECTED, ROOT, DraftTree, Verdict
from .kv_cache import CachedLM


def _node_token_probs(tree: DraftTree, probs: torch.Tensor) -> list[float]:
    """``probs[parent(i), token(i)]`` per node (1.0 for the root)."""
    if len(tree) == 1:
        return [1.0]
    parents = torch.tensor(tree.parent[1:], device=probs.device)
    tokens = torch.tensor(tree.token[1:], device=probs.device)
    return [1.0] + probs[parents, tokens].tolist()


def greedy_accept(tree: DraftTree, logits: torch.Tensor) -> Verdict:
    """Walk from the root: at each node take the target's argmax and descend into the child with that
    token if there is one; otherwise it is the bonus token.  ``logits``: ``[len(tree), vocab]``,
    row i = the target's next-token logits after node i."""
    kids = tree.children_lists()
    argmax = logits.argmax(dim=-1).tolist()
    status = [ROOT] + [NOT_REACHED] * (len(tree) - 1)
    target_token = [NO_TOKEN] * len(tree)
    path = [0]
    while True:
        node = path[-1]
        want = argmax[node]
        target_token[node] = want
        nxt = None
        for child in kids[node]:
            if nxt is None and tree.token[child] == want:
                nxt = child
                status[child] = ACCEPTED
            else:
                status[child] = REJECTED
        if nxt is None:
            probs = torch.softmax(logits.float(), dim=-1)
            return Verdict(status, path, want, target_token, _node_token_probs(tree, probs))
        path.append(nxt)


def sampling_accept(tree: DraftTree, probs: torch.Tensor, generator: torch.Generator) -> Verdict:
    """EAGLE's rule for trees that are a deterministic function of the context: at the current node,
    try its children in tree order, accepting child x with probability p(x) and otherwise setting
    p(x) = 0 and renormalising; if every child is refused, the bonus token is drawn from what remains
    of p.  This samples exactly from the target.  ``probs``: ``[len(tree), vocab]`` target
    probabilities (temperature applied); ``generator`` is a CPU generator."""
    kids = tree.children_lists()
    status = [ROOT] + [NOT_REACHED] * (len(tree) - 1)
    target_token = [NO_TOKEN] * len(tree)
    path = [0]
    while True:
        node = path[-1]
        p = probs[node].to("cpu", torch.float64)
        p = p / p.sum()
        nxt = None
        for child in kids[node]:
            x = tree.token[child]
            if nxt is None and torch.rand((), generator=generator, dtype=torch.float64) <= p[x]:
                nxt = child
                status[child] = ACCEPTED
            elif nxt is None:
                status[child] = REJECTED
                p[x] = 0.0
                p = p / p.sum()
        if nxt is None:
            bonus = int(torch.multinomial(p, 1, generator=generator))
            target_token[node] = bonus
            return Verdict(status, path, bonus, target_token, _node_token_probs(tree, probs))
        target_token[node] = tree.token[nxt]
        path.append(nxt)


class Verifier:
    """Runs the target over each step's tree on its own KV cache (prefix + accepted path only).

    ``hidden_layers``: target hidden states to collect for a feature-level drafter (see
    ``CachedLM``); ``prefill`` and ``commit`` return them for the positions they commit."""

    def __init__(self, target: LoadedModel, hidden_layers: Sequence[int] = ()) -> None:
        self.target = target
        self.cached = CachedLM(target, hidden_layers)
        self._tree_hidden: torch.Tensor | None = None

    def prefill(self, prompt_ids: Sequence[int]) -> torch.Tensor | None:
        """Feed every prompt token but the last, which becomes the first root.  Returns the hidden
        states of the fed positions ``[len(prompt_ids) - 1, layers, H]`` (None if none requested)."""
        if len(prompt_ids) <= 1:
            return None
        return self.cached.extend_committed(prompt_ids[:-1])[1]

    def verify(self, tree: DraftTree, temperature: float, generator: torch.Generator) -> Verdict:
        """One target forward over the whole tree (root included), then the acceptance rule."""
        logits, self._tree_hidden = self.cached.forward_nodes(tree, range(len(tree)), self.cached.committed_len)
        if temperature == 0:
            return greedy_accept(tree, logits)
        return sampling_accept(tree, torch.softmax(logits / temperature, dim=-1), generator)

    def commit(self, verdict: Verdict) -> torch.Tensor | None:
        """Keep the KV rows of the accepted path (root included); the bonus token is the next root.
        Returns the path's hidden states ``[len(path), layers, H]`` (None if none requested)."""
        self.cached.commit_nodes(verdict.accepted_path)
        if self._tree_hidden is None:
            return None
        return self._tree_hidden[verdict.accepted_path]
