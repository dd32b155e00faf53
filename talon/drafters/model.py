"""A small causal LM as drafter (or the target's own first layers, ``layers:K``)."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import nn

from ..models.loaded import LoadedModel
from ..runtime.kv_cache import CachedLM
from ..tree import DraftTree
from .base import Drafter, Proposal, common_prefix


class ModelDrafter(Drafter):
    """A small causal LM sharing the target's tokenizer, with its own KV cache and tree masks.

    ``start`` feeds the prompt but its last token (like the target's prefill).  ``begin_step`` crops the
    cache to the part of the committed sequence it has seen, and feeds the rest (the accepted path and
    the bonus token; the prompt's last token at the first step) in one causal forward, which also yields
    the root's distribution.  Tree nodes are then fed layer by layer with ancestor masks; their rows are
    dropped at the next ``begin_step``.

    ``vocab_size``: the target's LM head rows, where the drafter's differ (a model family pads its heads
    to different sizes over one tokenizer, e.g. 152,064 rows against 151,936): its proposals are cut to
    them (the rows past the tokenizer are padding) or padded with impossible tokens."""

    can_draft_ahead = True

    def __init__(self, lm: LoadedModel, vocab_size: int | None = None) -> None:
        self.lm = lm
        self.vocab_size = vocab_size
        self.name = lm.name
        self._cached: CachedLM | None = None
        self._seq: list[int] = []  # the committed sequence of the last begin_step (root last)

    @property
    def network(self) -> nn.Module:
        return self.lm.model

    def release(self) -> None:
        if self._cached is not None:
            self._cached.release()

    def start(
        self, prompt_ids: Sequence[int], target_features: torch.Tensor | None = None, rows: int | None = None
    ) -> None:
        self.release()
        self._cached = CachedLM(self.lm, rows=rows)
        self._seq = [int(t) for t in prompt_ids]
        if len(self._seq) > 1:
            self._cached.extend_committed(self._seq[:-1], logit_rows=None)

    def begin_step(self, committed_ids: Sequence[int], target_features: torch.Tensor | None = None) -> Proposal:
        committed = [int(t) for t in committed_ids]
        keep = min(self._cached.committed_len, common_prefix(self._seq, committed), len(committed) - 1)
        self._cached.crop_committed(keep)
        self._seq = committed
        logits = self._cached.extend_committed(committed[keep:], logit_rows="last").logits
        return self._proposal(logits)

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        root_position = len(self._seq) - 1
        logits = self._cached.forward_nodes(tree, frontier, root_position, logit_rows="all").logits
        return self._proposal(logits)

    def _proposal(self, logits: torch.Tensor) -> Proposal:
        """Log-probabilities ``[rows, vocab_size]`` from the drafter's logits ``[rows, its vocab]``."""
        wanted = self.vocab_size or logits.shape[-1]
        if logits.shape[-1] > wanted:
            logits = logits[..., :wanted]
        elif logits.shape[-1] < wanted:
            logits = torch.nn.functional.pad(logits, (0, wanted - logits.shape[-1]), value=float("-inf"))
        return Proposal(torch.log_softmax(logits, dim=-1))
