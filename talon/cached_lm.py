"""A causal LM with its own KV cache that can run tree-masked forwards and keep only chosen rows.

Both the verifier (target) and the model drafter use it.  The cache holds two kinds of rows:

* committed rows ``[0, committed_len)``: tokens that are part of the output (or the prompt);
* tree rows after them: draft-tree nodes fed during the current step (``node_rows`` maps node -> row).

A query always sees every committed row, plus the tree rows of its own ancestors and itself.
"""
from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch
from transformers import DynamicCache

from .models import LoadedModel
from .tree import DraftTree


class CachedLM:
    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.cache = DynamicCache(config=lm.model.config)
        self.committed_len = 0
        self.node_rows: dict[int, int] = {}

    @property
    def cache_len(self) -> int:
        return self.cache.get_seq_length()

    def _forward(self, ids: Sequence[int], positions: np.ndarray, attend: torch.Tensor) -> torch.Tensor:
        """Run ``ids`` (``q`` tokens) against the cache.  ``attend``: bool ``[q, cache_len + q]``.
        Returns float32 logits ``[q, vocab]`` on the model's device."""
        device = self.lm.device
        input_ids = torch.tensor([list(ids)], dtype=torch.long, device=device)
        position_ids = torch.as_tensor(positions, dtype=torch.long, device=device).unsqueeze(0)
        mask = attend.to(device)[None, None]
        out = self.lm.model(input_ids=input_ids, position_ids=position_ids, attention_mask=mask,
                            past_key_values=self.cache, use_cache=True)
        return out.logits[0].float()

    def extend_committed(self, ids: Sequence[int]) -> torch.Tensor:
        """Append committed tokens (causal among themselves) after dropping any tree rows.
        Returns logits ``[len(ids), vocab]``; ``ids`` must be non-empty."""
        self.drop_tree()
        q, start = len(ids), self.committed_len
        attend = torch.ones(q, start + q, dtype=torch.bool)
        attend[:, start:] = torch.tril(torch.ones(q, q, dtype=torch.bool))
        logits = self._forward(ids, np.arange(start, start + q), attend)
        self.committed_len += q
        return logits

    def forward_nodes(self, tree: DraftTree, nodes: Sequence[int], root_position: int) -> torch.Tensor:
        """Feed tree ``nodes`` (whose ancestors, other than committed ones, were fed before or are
        earlier in ``nodes``).  Position of node i is ``root_position + depth[i]``.
        Returns logits ``[len(nodes), vocab]``."""
        start = self.cache_len
        q = len(nodes)
        attend = torch.zeros(q, start + q, dtype=torch.bool)
        attend[:, : self.committed_len] = True
        new_rows = {node: start + k for k, node in enumerate(nodes)}
        rows = {**self.node_rows, **new_rows}
        for k, node in enumerate(nodes):
            a = node
            while a != -1:
                if a in rows:
                    attend[k, rows[a]] = True
                a = tree.parent[a]
        positions = root_position + np.asarray([tree.depth[n] for n in nodes], dtype=np.int64)
        logits = self._forward([tree.token[n] for n in nodes], positions, attend)
        self.node_rows = rows
        return logits

    def commit_nodes(self, nodes: Sequence[int]) -> None:
        """Keep the committed rows plus the rows of ``nodes`` (a root-to-node path, in order); those
        become committed.  Every other tree row is dropped."""
        keep = list(range(self.committed_len)) + [self.node_rows[n] for n in nodes]
        if keep != list(range(len(keep))) or len(keep) != self.cache_len:
            index = torch.tensor(keep, dtype=torch.long, device=self.lm.device)
            for layer in self.cache.layers:
                layer.keys = layer.keys.index_select(2, index)
                layer.values = layer.values.index_select(2, index)
        self.committed_len = len(keep)
        self.node_rows = {}

    def drop_tree(self) -> None:
        """Forget this step's tree rows, keeping the committed prefix."""
        if self.cache_len > self.committed_len:
            for layer in self.cache.layers:
                layer.keys = layer.keys[:, :, : self.committed_len]
                layer.values = layer.values[:, :, : self.committed_len]
        self.node_rows = {}
