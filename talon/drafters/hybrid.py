"""Hybrid drafting (the AAAI "Talon"'s adaptive hybrid, our stand-in): a model drafter's and prompt
lookup's proposals merged into one tree, weighted by each source's running acceptance."""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import nn

from ..tree import SOURCE_MODEL, SOURCE_RETRIEVAL, DraftTree, Verdict
from .base import Drafter, Proposal
from .ngram import NgramDrafter


class HybridDrafter(Drafter):
    """Model drafts and retrieval drafts merged into one proposal, so one tree holds both and the tree
    builder's budget applies to the merged tree.

    Per frontier node the proposal is the mixture ``w * q_retrieval + (1 - w) * q_model`` (just
    ``q_model`` where retrieval has no match), so the builder's path-probability ranking hands out the
    budget: the larger a source's weight, the more of the budget its branches win.  Each node is
    labelled with the source that contributed more of its probability.

    Adaptive weight: per source, running counts of its nodes the target *reached* (children of an
    accepted node, which verification checked) and *accepted*, decayed by ``decay`` every step so the
    weight follows the current stretch of text.  Acceptance ``a = (accepted + 1) / (reached + 2)``, and
    ``w = a_retrieval / (a_retrieval + a_model)``, clamped to ``[min_weight, 1 - min_weight]`` so
    neither source is shut out.  ``step_info`` records both rates and ``w`` for the trace."""

    def __init__(
        self,
        model: Drafter,
        retrieval: NgramDrafter,
        decay: float = 0.8,
        min_weight: float = 0.05,
        fixed_weight: float | None = None,
    ) -> None:
        self.model, self.retrieval = model, retrieval
        self.name = f"hybrid: {model.name} + {retrieval.name}"
        self.feature_layers = model.feature_layers
        self.calibration_prior = model.calibration_prior
        self.decay, self.min_weight = decay, min_weight
        self.can_draft_ahead = model.can_draft_ahead
        self.fixed_weight = fixed_weight
        """When set, the retrieval weight to use instead of the running one (the tree lab replays a step)."""
        self._counts = {SOURCE_MODEL: [0.0, 0.0], SOURCE_RETRIEVAL: [0.0, 0.0]}  # [reached, accepted]

    @property
    def network(self) -> nn.Module | None:
        return self.model.network

    def release(self) -> None:
        self.model.release()

    def start(
        self, prompt_ids: Sequence[int], target_features: torch.Tensor | None = None, rows: int | None = None
    ) -> None:
        self.model.start(prompt_ids, target_features, rows)
        self.retrieval.start(prompt_ids)
        self._counts = {SOURCE_MODEL: [0.0, 0.0], SOURCE_RETRIEVAL: [0.0, 0.0]}

    def acceptance(self, source: str) -> float:
        reached, accepted = self._counts[source]
        return (accepted + 1.0) / (reached + 2.0)

    @property
    def retrieval_weight(self) -> float:
        if self.fixed_weight is not None:
            return self.fixed_weight
        a_r, a_m = self.acceptance(SOURCE_RETRIEVAL), self.acceptance(SOURCE_MODEL)
        return min(max(a_r / (a_r + a_m), self.min_weight), 1.0 - self.min_weight)

    def begin_step(self, committed_ids: Sequence[int], target_features: torch.Tensor | None = None) -> Proposal:
        return self._merge(
            self.model.begin_step(committed_ids, target_features), self.retrieval.begin_step(committed_ids)
        )

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        return self._merge(self.model.propose(tree, frontier), self.retrieval.propose(tree, frontier))

    def _merge(self, model: Proposal, retrieval: Proposal) -> Proposal:
        """The mixture of the two proposals (rows for the same frontier), each token labelled with
        the source that contributed more of its probability."""
        lp_model = model.logprobs
        lp_retrieval = retrieval.logprobs.to(lp_model.device)
        w = self.retrieval_weight
        from_retrieval = lp_retrieval + math.log(w)
        from_model = lp_model + math.log1p(-w)
        matched = torch.isfinite(lp_retrieval).any(dim=1, keepdim=True)
        # Where both sources give a token probability 1, log(w) + log(1 - w) summed in float32 can round a
        # hair above 0: a child would then outrank its parent, and EAGLE-2's re-rank would keep orphans.
        mixed = torch.where(matched, torch.logaddexp(from_retrieval, from_model), lp_model).clamp_max(0.0)
        return Proposal(mixed, SOURCE_MODEL, (from_retrieval > from_model) & matched, retrieval.match)

    def observe(self, tree: DraftTree, verdict: Verdict) -> None:
        for counts in self._counts.values():
            counts[0] *= self.decay
            counts[1] *= self.decay
        on_path = set(verdict.accepted_path)
        for node in range(1, len(tree)):
            if tree.parent[node] in on_path:  # verification checked this node
                counts = self._counts[tree.source[node]]
                counts[0] += 1.0
                counts[1] += float(node in on_path)
        self.model.observe(tree, verdict)

    def step_info(self) -> dict:
        return {
            "retrieval_weight": round(self.retrieval_weight, 4),
            "retrieval_acceptance": round(self.acceptance(SOURCE_RETRIEVAL), 4),
            "model_acceptance": round(self.acceptance(SOURCE_MODEL), 4),
        }
