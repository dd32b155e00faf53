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

from ..models.loaded import LoadedModel
from ..runtime.kv_cache import KVBuffer, TreeKVCache
from ..runtime.rows import GrowingRows
from ..tree import DraftTree
from .base import Drafter, Proposal, common_prefix


class HeadShape(Protocol):
    """What the drafter reads of a head's config."""

    feature_layers: tuple[int, ...]  # target hidden-state indices (0 = embeddings, i = entering layer i)
    hidden_size: int  # H: width of the head's states
    vocab_size: int  # the target's vocabulary
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

    def __call__(
        self,
        features: torch.Tensor,
        token_embeds: torch.Tensor,
        position_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        cache: Cache,
    ) -> torch.Tensor:
        """``[B, T, H]`` features (fused target states or the head's own states at the parents) and
        embeddings, positions ``[B, T]`` (the token's position in the sequence), bool mask
        ``[B, 1, T, cache_len + T]`` -> output states ``[B, T, H]``; appends to ``cache``."""

    def logits(self, states: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """``[..., vocab]`` next-token logits (``-inf`` outside the draft vocabulary)."""

    def log_probs(self, states: torch.Tensor, lm_head: nn.Module) -> torch.Tensor:
        """``[..., vocab]`` float32 next-token log-probabilities (``-inf`` outside the draft vocabulary)."""


class HeadCache(TreeKVCache):
    """The head's tree KV cache.  Cache row k holds head position k + 1 (position 0 has no feature).
    Its forwards return the head's output states as ``hidden`` (the next layer's features)."""

    def __init__(self, head: HeadNetwork, target: LoadedModel, rows: int | None = None) -> None:
        cfg = head.config
        dtype = head.norm.weight.dtype
        super().__init__(
            partial(KVBuffer, 1, cfg.num_key_value_heads, cfg.head_dim, dtype, target.device), target.device
        )
        self.head, self.target = head, target
        self.position_offset = 1  # position 0 has no preceding feature
        # Keyed by the head object itself: its graphs read this head's weights.
        self.use_runner(target.runners, ("head", head), rows, extra={"features": ((cfg.hidden_size,), dtype)})

    def _model_forward(self, input_ids, position_ids, mask, features=None) -> tuple[torch.Tensor, None]:
        embeds = self.head.embed(input_ids, self.target)
        return self.head(features.unsqueeze(0), embeds, position_ids, mask, self.kv)[0], None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        """The head's next-token log-probabilities (logits already normalised: the drafter's proposals)."""
        return self.head.log_probs(hidden, self.target.model.get_output_embeddings())


class HeadDrafter(Drafter):
    """Drafts with a ``HeadNetwork``: committed positions read the target's fused features, tree nodes
    read the head's own output at their parent (EAGLE's recurrence).  One head forward per tree layer.

    Head cache row k holds head position k + 1, which reads the token at position k + 1 and the
    feature of position k.  Feature rows are the target's (fused) where the target has verified the
    position, else stand-ins: the head's own state at the node of its last tree that the position's
    token followed (a guessed outcome drafted ahead).  When the target's features replace stand-ins,
    the cache rows that read them are recomputed at the next ``begin_step``."""

    can_draft_ahead = True

    def __init__(self, head: HeadNetwork, target: LoadedModel, name: str = "EAGLE-style head") -> None:
        self.head, self.target = head, target
        self.feature_layers = head.config.feature_layers
        self.name = name
        self._cache: HeadCache | None = None
        self._seq: list[int] = []  # the committed sequence of the last begin_step (root last)
        self._features: GrowingRows | None = None  # [positions, H]: fused feature of position k at row k
        self._true_rows = 0  # leading feature rows that are the target's (the rest stand in)
        self._node_states: dict[int, torch.Tensor] = {}  # this step's tree node -> head output state [H]
        self._tree: DraftTree | None = None  # the tree of the last propose call
        self._tree_root = -1  # position of that tree's root

    @property
    def network(self) -> HeadNetwork:
        return self.head

    def release(self) -> None:
        if self._cache is not None:
            self._cache.release()

    def start(
        self, prompt_ids: Sequence[int], target_features: torch.Tensor | None = None, rows: int | None = None
    ) -> None:
        self.release()
        self._cache = HeadCache(self.head, self.target, rows)
        self._seq = [int(t) for t in prompt_ids]
        self._features = GrowingRows((self.head.config.hidden_size,), self.head.norm.weight.dtype, self.target.device)
        self._true_rows = 0
        self._node_states, self._tree, self._tree_root = {}, None, -1
        if target_features is not None:
            self._read_features(target_features)
        if len(self._seq) > 2 and self._true_rows >= len(self._seq) - 2:  # positions 1 .. L-2; the root's per step
            self._cache.extend_committed(
                self._seq[1:-1], logit_rows=None, features=self._features.view()[: len(self._seq) - 2]
            )

    def begin_step(self, committed_ids: Sequence[int], target_features: torch.Tensor | None = None) -> Proposal:
        committed = [int(t) for t in committed_ids]
        last = len(committed) - 1  # the root's position
        lcp = common_prefix(self._seq, committed)
        standins = self._standins(committed, lcp)  # read before anything is cropped
        self._features.truncate(lcp)  # feature k depends on tokens 0..k
        self._true_rows = min(self._true_rows, lcp)
        stale = self._read_features(target_features) if target_features is not None else last
        for position in range(self._features.length, last):
            if position not in standins:
                raise RuntimeError(
                    f"{self.name}: no target features for position {position}, which the head did not draft either"
                )
            self._features.append(standins[position][None])
        self._seq = committed
        self._tree, self._node_states = None, {}
        if last < 1:  # a one-token context: no feature for the root
            return Proposal(torch.full((1, self.head.config.vocab_size), float("-inf"), device=self.target.device))
        keep = min(self._cache.committed_len, lcp - 1, stale, last - 1)  # the root's row is always fed anew
        self._cache.crop_committed(max(keep, 0))
        start = self._cache.committed_len
        out = self._cache.extend_committed(
            committed[start + 1 :], logit_rows="last", features=self._features.view()[start:last]
        )
        self._node_states = {0: out.hidden[-1]}
        self._tree_root = last
        return Proposal(out.logits)

    def _read_features(self, target_features: torch.Tensor) -> int:
        """Fuse the target's feature rows not read yet into the feature rows; returns the first row whose
        value changed (a stand-in replaced), or a row past every stand-in when none did."""
        first_new = self._true_rows
        held = self._features.length
        rows = target_features.shape[0]
        if rows > first_new:
            self._features.write(first_new, self.head.fuse_features(target_features[first_new:rows]))
            self._true_rows = rows
        return first_new if first_new < min(held, rows) else max(held, rows)

    def _standins(self, committed: list[int], lcp: int) -> dict[int, torch.Tensor]:
        """The head's own states standing in for the target's features at positions of ``committed``
        that follow this step's tree from its root (position -> state ``[H]``); ``lcp``: how much of
        ``committed`` the last ``begin_step`` saw too (the tree's context must be among it)."""
        root = self._tree_root
        if not 0 <= root < lcp or 0 not in self._node_states:
            return {}
        out = {root: self._node_states[0]}
        node, tree = 0, self._tree
        for position in range(root + 1, len(committed) - 1):
            if tree is None:
                break
            node = next((c for c in tree.children(node) if tree.token[c] == committed[position]), None)
            if node is None or node not in self._node_states:
                break
            out[position] = self._node_states[node]
        return out

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        self._tree = tree
        features = torch.stack([self._node_states[tree.parent[u]] for u in frontier])
        out = self._cache.forward_nodes(tree, frontier, len(self._seq) - 1, features=features)
        for k, u in enumerate(frontier):
            self._node_states[u] = out.hidden[k]
        return Proposal(out.logits)
