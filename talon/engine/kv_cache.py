"""Causal models with their own KV cache that run tree-masked forwards and keep only chosen rows.

The verifier (target), the model drafter and the draft head all use it.  The cache holds:

* committed rows ``[0, committed_len)``: tokens that are part of the output (or the prompt);
* tree rows after them: draft-tree nodes fed during the current step (``node_rows`` maps node -> row).

A query always sees every committed row, plus the tree rows of its own ancestors and itself.
``TreeKVCache`` does that bookkeeping; subclasses say how one forward is run.
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from ..models.loaded import LoadedModel
from ..tree import DraftTree


class TreeKVCache(ABC):
    """KV-cache bookkeeping for committed prefix + draft-tree rows; one subclass per kind of model.

    ``extra`` keyword arguments of ``extend_committed`` / ``forward_nodes`` (e.g. per-query input
    features of a draft head, ``[q, ...]``) are passed through to ``_model_forward``."""

    def __init__(self, cache: DynamicCache, device: torch.device) -> None:
        self.cache = cache
        self.device = device
        self.committed_len = 0
        self.node_rows: dict[int, int] = {}
        self.position_offset = 0
        """Position of cache row 0 (committed row k sits at position k + position_offset)."""

    @property
    def cache_len(self) -> int:
        return self.cache.get_seq_length()

    @abstractmethod
    def _model_forward(self, input_ids: torch.Tensor, position_ids: torch.Tensor, mask: torch.Tensor,
                       **extra) -> tuple[torch.Tensor, torch.Tensor | None]:
        """One forward on ``self.cache``: ``input_ids``/``position_ids`` ``[1, q]``, ``mask`` bool
        ``[1, 1, q, cache_len + q]``.  Returns float32 logits ``[q, vocab]`` and optional hidden
        states ``[q, ...]``."""

    def _forward(self, ids: Sequence[int], positions: np.ndarray, attend: torch.Tensor, **extra):
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=self.device)
        position_ids = torch.as_tensor(positions, dtype=torch.long, device=self.device).unsqueeze(0)
        return self._model_forward(input_ids, position_ids, attend.to(self.device)[None, None], **extra)

    def extend_committed(self, ids: Sequence[int], **extra):
        """Append committed tokens (causal among themselves) after dropping any tree rows.
        Returns ``(logits [len(ids), vocab], hidden or None)``; ``ids`` must be non-empty."""
        self.drop_tree()
        q, start = len(ids), self.committed_len
        attend = torch.ones(q, start + q, dtype=torch.bool)
        attend[:, start:] = torch.tril(torch.ones(q, q, dtype=torch.bool))
        positions = np.arange(start, start + q) + self.position_offset
        out = self._forward(ids, positions, attend, **extra)
        self.committed_len += q
        return out

    def forward_nodes(self, tree: DraftTree, nodes: Sequence[int], root_position: int, **extra):
        """Feed tree ``nodes`` (whose ancestors, other than committed ones, were fed before or are
        earlier in ``nodes``).  Position of node i is ``root_position + depth[i]``.
        Returns ``(logits [len(nodes), vocab], hidden or None)``."""
        nodes = list(nodes)
        start, q = self.cache_len, len(nodes)
        attend = torch.zeros(q, start + q, dtype=torch.bool)
        attend[:, : self.committed_len] = True
        rows = {**self.node_rows, **{node: start + k for k, node in enumerate(nodes)}}
        for k, node in enumerate(nodes):
            a = node
            while a != -1:
                if a in rows:
                    attend[k, rows[a]] = True
                a = tree.parent[a]
        positions = root_position + np.asarray([tree.depth[n] for n in nodes], dtype=np.int64)
        out = self._forward([tree.token[n] for n in nodes], positions, attend, **extra)
        self.node_rows = rows
        return out

    def commit_nodes(self, nodes: Sequence[int]) -> None:
        """Keep the committed rows plus the rows of ``nodes`` (a root-to-node path, in order); those
        become committed.  Every other tree row is dropped."""
        keep = list(range(self.committed_len)) + [self.node_rows[n] for n in nodes]
        if keep != list(range(len(keep))) or len(keep) != self.cache_len:
            index = torch.tensor(keep, dtype=torch.long, device=self.device)
            for layer in self.cache.layers:
                layer.keys = layer.keys.index_select(2, index)
                layer.values = layer.values.index_select(2, index)
        self.committed_len = len(keep)
        self.node_rows = {}

    def crop_committed(self, length: int) -> None:
        """Forget the tree rows and every committed row from ``length`` on (no-op beyond the end)."""
        self.drop_tree()
        if length < self.committed_len:
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, :length]
                layer.values = layer.values[:, :, :length]
            self.committed_len = length

    def drop_tree(self) -> None:
        """Forget this step's tree rows, keeping the committed prefix."""
        if self.cache_len > self.committed_len:
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, : self.committed_len]
                layer.values = layer.values[:, :, : self.committed_len]
        self.node_rows = {}


class CachedLM(TreeKVCache):
    """A ``transformers`` causal LM on its own cache.

    ``hidden_layers`` selects hidden states to return with every forward (``0`` = the embeddings,
    ``i`` = the output of decoder layer i, before the final norm), stacked as ``[q, len(layers), H]``."""

    def __init__(self, lm: LoadedModel, hidden_layers: Sequence[int] = ()) -> None:
        super().__init__(DynamicCache(config=lm.model.config), lm.device)
        self.lm = lm
        self.hidden_layers = tuple(hidden_layers)

    def _model_forward(self, input_ids, position_ids, mask, **extra):
        want = list(self.hidden_layers)
        out = self.lm.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                            past_key_values=self.cache, use_cache=True,
                            output_hidden_states=want if want else None)
        hidden = torch.stack([out.hidden_states[i][0] for i in want], dim=1) if want else None
        return out.logits[0].float(), hidden
