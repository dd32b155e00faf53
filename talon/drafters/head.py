"""Drafting with a draft head that reads the target's hidden states: its KV cache and the ``Drafter``
that feeds it the target's features.  One drafter for every head network (``HeadNetwork``): ours
(``head_model.DraftHead``) and EAGLE-3's (``eagle3_model.Eagle3Head``)."""
from __future__ import annotations

from collections.abc import Sequence
from functools import partial
from typing import Protocol

import torch
from torch import nn
from transformers.cache_utils import Cache

from ..engine.kv_cache import KVBuffer, TreeKVCache
from ..models.loaded import LoadedModel
from ..tree import DraftTree
from .base import Drafter, Proposal


class HeadShape(Protocol):
    """What the drafter reads of a head's config."""

    feature_layers: tuple[int, ...]   # target hidden-state indices (0 = embeddings, i = entering layer i)
    hidden_size: int                  # H: width of the head's states
    vocab_size: int                   # the target's vocabulary
    num_key_value_heads: int
    head_dim: int


class HeadNetwork(Protocol):
    """A draft head network: one call drafts the next token at every fed position."""

    config: HeadShape
    norm: nn.Module  # its weight's dtype is the head's

    def embed(self, input_ids: torch.Tensor, target: LoadedModel) -> torch.Tensor:
        """``[..., H]`` token embeddings."""

    def fuse_features(self, target_hidden: torch.Tensor) -> torch.Tensor:
        """``[..., len(feature_layers), Ht]`` target states -> ``[..., H]`` features."""

    def __call__(self, features: torch.Tensor, token_embeds: torch.Tensor, position_ids: torch.Tensor,
                 attention_mask: torch.Tensor, cache: Cache) -> torch.Tensor:
        """``[B, T, H]`` features (fused target states or the head's own states at the parents) and
        embeddings, positions ``[B, T]`` (the token's position in the sequence), bool mask
        ``[B, 1, T, cache_len + T]`` -> output states ``[B, T, H]``; appends to ``cache``."""

    def logits(self, states: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """``[..., vocab]`` next-token logits (``-inf`` outside the draft vocabulary)."""


class HeadCache(TreeKVCache):
    """The head's tree KV cache.  Cache row k holds head position k + 1 (position 0 has no feature).
    Its forwards return the head's output states as ``hidden`` (the next layer's features)."""

    def __init__(self, head: HeadNetwork, target: LoadedModel, rows: int | None = None) -> None:
        cfg = head.config
        dtype = head.norm.weight.dtype
        super().__init__(partial(KVBuffer, 1, cfg.num_key_value_heads, cfg.head_dim, dtype, target.device),
                         target.device)
        self.head, self.target = head, target
        self.position_offset = 1  # position 0 has no preceding feature
        # Keyed by the head object itself: its graphs read this head's weights.
        self.use_runner(target.runners, ("head", head), rows, extra={"features": ((cfg.hidden_size,), dtype)})

    def _model_forward(self, input_ids, position_ids, mask, features=None) -> tuple[torch.Tensor, None]:
        embeds = self.head.embed(input_ids, self.target)
        return self.head(features.unsqueeze(0), embeds, position_ids, mask, self.kv)[0], None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return self.head.logits(hidden, self.target.model.get_output_embeddings()).float()


class FeatureRows:
    """A growing ``[rows, H]`` buffer (preallocated, doubling): appends without re-concatenating."""

    def __init__(self, width: int, dtype: torch.dtype, device: torch.device, capacity: int = 256) -> None:
        self.buffer = torch.empty(capacity, width, dtype=dtype, device=device)
        self.length = 0

    def append(self, rows: torch.Tensor) -> None:
        end = self.length + rows.shape[0]
        if end > self.buffer.shape[0]:
            bigger = self.buffer.new_empty(max(end, 2 * self.buffer.shape[0]), self.buffer.shape[1])
            bigger[: self.length] = self.buffer[: self.length]
            self.buffer = bigger
        self.buffer[self.length:end] = rows
        self.length = end

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)

    def __getitem__(self, rows: slice) -> torch.Tensor:
        return self.buffer[: self.length][rows]

    def __setitem__(self, rows: slice, value: torch.Tensor) -> None:
        self.buffer[: self.length][rows] = value


class HeadDrafter(Drafter):
    """Drafts with a ``HeadNetwork``: committed positions read the target's fused features, tree nodes
    read the head's own output at their parent (EAGLE's recurrence).  One head forward per tree layer."""

    can_draft_ahead = True

    def __init__(self, head: HeadNetwork, target: LoadedModel, name: str = "EAGLE-style head") -> None:
        self.head, self.target = head, target
        self.feature_layers = head.config.feature_layers
        self.name = name
        self._cache: HeadCache | None = None
        self._seq: list[int] = []
        self._features: FeatureRows | None = None  # feature of committed position k at row k
        self._node_states: dict[int, torch.Tensor] = {}
        self._tree: DraftTree | None = None   # the tree of the last propose call
        self._stale_from: int | None = None   # first cache row built on a stand-in feature since replaced

    def release(self) -> None:
        if self._cache is not None:
            self._cache.release()

    def reset(self, prompt_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self.release()
        self._cache = HeadCache(self.head, self.target, self.take_planned_rows())
        self._seq = list(prompt_ids)
        self._features = FeatureRows(self.head.config.hidden_size, self.head.norm.weight.dtype, self.target.device)
        if target_hidden is not None:
            self._features.append(self.head.fuse_features(target_hidden))
        self._node_states = {}
        self._tree, self._stale_from = None, None
        if len(self._seq) > 2 and target_hidden is not None:  # positions 1 .. L-2; the root's comes per step
            self._cache.extend_committed(self._seq[1:-1], logit_rows=None, features=self._features[: len(self._seq) - 2])

    def rewind_step(self) -> None:
        self._cache.crop_committed(len(self._seq) - 2)
        self._node_states = {}

    def begin_step(self, tree: DraftTree) -> Proposal:
        cache = self._cache
        self._tree = tree
        start = cache.committed_len          # head rows cover positions 1 .. start
        tokens = self._seq[start + 1:]        # positions start+1 .. L-1 (the root is last)
        if not tokens:                        # a one-token prompt: no feature for the root
            return Proposal(torch.full((1, self.head.config.vocab_size), float("-inf")))
        out = cache.extend_committed(tokens, logit_rows="last", features=self._features[start:start + len(tokens)])
        self._node_states = {0: out.hidden[-1]}
        return Proposal(torch.log_softmax(out.logits, dim=-1))

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        self._tree = tree
        features = torch.stack([self._node_states[tree.parent[u]] for u in frontier])
        out = self._cache.forward_nodes(tree, frontier, len(self._seq) - 1, features=features)
        for k, u in enumerate(frontier):
            self._node_states[u] = out.hidden[k]
        return Proposal(torch.log_softmax(out.logits, dim=-1))

    def commit(self, new_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        if target_hidden is not None:
            features = self.head.fuse_features(target_hidden)
        else:  # speculative: the head's own state at each node stands in for the target's feature there
            nodes = [0]
            for token in new_ids[:-1]:
                nodes.append(next(c for c in self._tree.children(nodes[-1]) if self._tree.token[c] == token))
            features = torch.stack([self._node_states[n] for n in nodes])
        self._cache.drop_tree()
        if self._stale_from is not None:
            self._cache.crop_committed(min(self._cache.committed_len, self._stale_from))
            self._stale_from = None
        self._seq.extend(int(t) for t in new_ids)
        self._features.append(features)
        self._node_states = {}

    def checkpoint(self) -> int:
        return len(self._seq)

    def rollback(self, checkpoint: int) -> None:
        del self._seq[checkpoint:]
        self._features.truncate(checkpoint - 1)
        self._cache.crop_committed(min(self._cache.committed_len, checkpoint - 1))
        self._node_states = {}

    def confirm(self, checkpoint: int, target_hidden: torch.Tensor | None = None) -> None:
        """Swap the stand-in features of the confirmed tokens for the target's; the head's cache rows
        built on them are recomputed at the next commit (after the tree drafted from them is used)."""
        if target_hidden is None:
            return
        rows = slice(checkpoint - 1, checkpoint - 1 + target_hidden.shape[0])
        self._features[rows] = self.head.fuse_features(target_hidden)
        self._stale_from = checkpoint - 1 if self._stale_from is None else min(self._stale_from, checkpoint - 1)
