"""The drafter interface, about as narrow as transformers' candidate generator: one question, batched
over a whole frontier of the tree being grown: *what are the log-probabilities of the next token after
each of these nodes, and where do the proposals come from?*  One ``begin_step`` or ``propose`` call is
one drafter forward (the "delta" metric counts them).

Life cycle within a run::

    drafter.start(prompt_ids, target_features, rows)           # once
    per step:
        drafter.begin_step(committed_ids, target_features)     # the root's proposal
        drafter.propose(tree, frontier) ...                     # deeper layers, parents before children
        drafter.observe(tree, verdict)                          # adaptive drafters learn from it
    drafter.release()

There is no commit / rollback protocol: ``begin_step`` is handed the whole committed sequence and the
drafter crops itself to the longest common prefix with what it has seen, then feeds the rest.  So a
step after a rejected speculative guess (async decoding), a step drafted again at the same context (the
tree lab) and a plain step that skipped drafting are all just ``begin_step`` with the sequence as it is.

A feature-level drafter (EAGLE-style head) also reads the target's hidden states: it names the layers
in ``feature_layers`` and gets them as ``target_features``, ``[m, len(feature_layers), H]``: the target's
states at committed positions ``0 .. m - 1`` (``m <= len(committed_ids) - 1``: the root has none yet).
The engine hands the same growing log every time; a drafter reads only the rows it has not read.
Positions past ``m`` (a guessed outcome drafted ahead in async mode) take the drafter's own states at
the nodes of its last tree, and are recomputed once the target's arrive.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import nn

from ..tree import SOURCE_MODEL, DraftTree, Verdict


@dataclass
class Proposal:
    """A drafter's answer for one frontier.

    Attributes:
        logprobs: float32 ``[len(frontier), vocab]`` next-token log-probabilities after each frontier
            node (``-inf`` for tokens it will not propose).
        source: the ``DraftTree.source`` label of every proposed token, unless ``from_retrieval``
            says otherwise.
        from_retrieval: bool ``[len(frontier), vocab]`` or None: True where a token's probability came
            more from retrieval than from the model (a hybrid drafter's mixture).
        match: per frontier node, the length of the n-gram a retrieval proposal matched (0: none), or
            None for a model's proposal; kept in ``DraftTree.match`` for the calibration.
    """

    logprobs: torch.Tensor
    source: str = SOURCE_MODEL
    from_retrieval: torch.Tensor | None = None
    match: list[int] | None = None


def common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    """Length of the longest common prefix of ``a`` and ``b`` (slice comparisons, bisected: a few
    C-speed compares rather than a Python loop over a long context)."""
    lo, hi = 0, min(len(a), len(b))
    if list(a[:hi]) == list(b[:hi]):
        return hi
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if list(a[:mid]) == list(b[:mid]):
            lo = mid
        else:
            hi = mid - 1
    return lo


class Drafter(ABC):
    """Strategy interface for drafters; a new drafting method is one new subclass."""

    name: str = "drafter"
    feature_layers: tuple[int, ...] = ()
    """Target hidden states this drafter needs (0 = embeddings, i = output of decoder layer i)."""
    can_draft_ahead: bool = False
    """Whether it can draft from a guessed outcome before the target's states for it exist (async)."""
    calibration_prior: dict | None = None
    """A fitted calibration of this drafter's confidence (``talon.drafters.calibration``), if one ships
    with it; runs learn one online from their verdicts either way."""

    @abstractmethod
    def start(
        self, prompt_ids: Sequence[int], target_features: torch.Tensor | None = None, rows: int | None = None
    ) -> None:
        """Start a new run whose committed tokens so far are ``prompt_ids`` (the last one is the first
        root).  ``target_features``: ``[len(prompt_ids) - 1, len(feature_layers), H]`` (only when
        ``feature_layers`` is non-empty).  ``rows``: the most rows the run will hold (committed tokens
        plus one tree), so caches can take a static runner (CUDA graphs, ``talon.runtime.graphs``)."""

    @abstractmethod
    def begin_step(self, committed_ids: Sequence[int], target_features: torch.Tensor | None = None) -> Proposal:
        """Start a step at ``committed_ids`` (the whole committed sequence; the last token is the root):
        crop to the common prefix with what was seen, feed the rest, return the root's proposal (one row).
        ``target_features``: see the module docstring."""

    @abstractmethod
    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        """The proposal after each of ``frontier``'s nodes (draft nodes below the root of this step's
        tree whose parents were proposed for earlier in this step), one row per node."""

    @property
    def network(self) -> nn.Module | None:
        """The network this drafter runs on each call (a head, a draft LM), or None where it runs none
        (prompt lookup, plain decoding): the cost curve's key names how its layers run."""
        return None

    def observe(self, tree: DraftTree, verdict: Verdict) -> None:
        """The verified tree and the target's verdict on it.  No-op by default."""

    def step_info(self) -> dict:
        """JSON-ready drafter state recorded with the step it drafted (``StepRecord.drafter_info``)."""
        return {}

    def release(self) -> None:
        """Give back what the run borrowed (static runners); called when a run ends.  No-op by default."""


class NoDrafter(Drafter):
    """The drafter of plain decoding: it drafts nothing, and the root-only builder never asks it to."""

    name = ""

    def start(
        self, prompt_ids: Sequence[int], target_features: torch.Tensor | None = None, rows: int | None = None
    ) -> None:
        pass

    def begin_step(self, committed_ids: Sequence[int], target_features: torch.Tensor | None = None) -> Proposal:
        raise RuntimeError("plain decoding drafts nothing")

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        raise RuntimeError("plain decoding drafts nothing")
