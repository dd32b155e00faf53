"""A small causal LM as drafter (or the target's own first layers, ``layers:K``)."""
from __future__ import annotations

from collections.abc import Sequence

import torch

from ..engine.kv_cache import CachedLM
from ..models.loaded import LoadedModel
from ..tree import DraftTree
from .base import Drafter, Proposal


class ModelDrafter(Drafter):
    """A small causal LM sharing the target's tokenizer, with its own KV cache and tree masks.

    ``reset`` feeds the prompt but its last token (like the target's prefill); at the start of a step the
    committed tokens it has not seen (the accepted path and the bonus token; the prompt's last token at
    the first step) are fed in one causal forward, which also yields the root's distribution.  Tree nodes are then fed layer by layer with ancestor masks, and
    after the step the cache is cropped back to the committed prefix."""

    can_draft_ahead = True

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.name = lm.name
        self._cached: CachedLM | None = None
        self._seq: list[int] = []

    def release(self) -> None:
        if self._cached is not None:
            self._cached.release()

    def reset(self, prompt_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self.release()
        self._cached = CachedLM(self.lm, rows=self.take_planned_rows())
        self._seq = list(prompt_ids)
        if len(self._seq) > 1:
            self._cached.extend_committed(self._seq[:-1], logit_rows=None)

    def begin_step(self, tree: DraftTree) -> Proposal:
        pending = self._seq[self._cached.committed_len:]
        logits = self._cached.extend_committed(pending, logit_rows="last").logits
        return Proposal(torch.log_softmax(logits, dim=-1))

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        root_position = len(self._seq) - 1
        logits = self._cached.forward_nodes(tree, frontier, root_position, logit_rows="all").logits
        return Proposal(torch.log_softmax(logits, dim=-1))

    def rewind_step(self) -> None:
        self._cached.crop_committed(len(self._seq) - 1)

    def commit(self, new_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self._cached.drop_tree()
        self._seq.extend(int(t) for t in new_ids)

    def checkpoint(self) -> int:
        return len(self._seq)

    def rollback(self, checkpoint: int) -> None:
        del self._seq[checkpoint:]
        self._cached.crop_committed(checkpoint)
