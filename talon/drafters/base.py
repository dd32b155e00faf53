"""The drafter interface: one question, batched over a whole frontier of the tree being grown: *what
are the log-probabilities of the next token after each of these nodes, and where do the proposals
come from?*  One ``begin_step`` or ``propose`` call is one drafter forward (the "delta" metric counts
them).

Life cycle within a run::

    drafter.reset(prompt_ids)                 # once
    per step:
        drafter.begin_step(tree)              # the root: feeds what was committed since, starts the step
        drafter.propose(tree, frontier) ...   # deeper layers, parents fed before children
        drafter.observe(tree, accepted_path)  # what the target accepted (adaptive drafters learn from it)
        drafter.commit(new_ids)               # the tokens the target committed (path + bonus)

Asynchronous decoding (``talon.engine.decode``, ``execution="async"``) also drafts ahead from a guessed
outcome while the target verifies; only drafters that declare ``can_draft_ahead`` take part:
``checkpoint()`` before the guess, ``commit(guess)`` (a feature drafter gets ``target_hidden=None`` and
stands in its own states), then either ``rollback(checkpoint)`` when the guess was wrong or
``confirm(checkpoint, target_hidden)`` when it was right.

A feature-level drafter (EAGLE-style head) also needs the target's hidden states: it names the
layers in ``feature_layers`` and receives, for every position the target has processed, the target's
hidden states there (``reset`` for the prompt, ``commit`` for the root and the accepted drafts).
"""
from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from ..tree import SOURCE_MODEL, SOURCE_RETRIEVAL, DraftTree


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
    """

    logprobs: torch.Tensor
    source: str = SOURCE_MODEL
    from_retrieval: torch.Tensor | None = None

    def sources(self, rows: Sequence[int], tokens: Sequence[int]) -> list[str]:
        """The source label of ``tokens[k]`` proposed in row ``rows[k]``, for every k (one host sync)."""
        if self.from_retrieval is None:
            return [self.source] * len(rows)
        flags = self.from_retrieval[list(rows), list(tokens)].tolist() if rows else []
        return [SOURCE_RETRIEVAL if f else SOURCE_MODEL for f in flags]


class Drafter(ABC):
    """Strategy interface for drafters; a new drafting method is one new subclass."""

    name: str = "drafter"
    feature_layers: tuple[int, ...] = ()
    """Target hidden states this drafter needs (0 = embeddings, i = output of decoder layer i)."""
    can_draft_ahead: bool = False
    """Whether it supports async decoding (implements ``checkpoint`` / ``rollback`` / ``confirm``)."""

    @abstractmethod
    def reset(self, prompt_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        """Start a new run whose committed tokens so far are ``prompt_ids`` (last one = first root).
        ``target_hidden``: ``[len(prompt_ids) - 1, len(feature_layers), H]``, the target's states at
        every prompt position but the last (only when ``feature_layers`` is non-empty)."""

    @abstractmethod
    def begin_step(self, tree: DraftTree) -> Proposal:
        """Start a step whose tree holds only its root (the last committed token): catch up on the
        committed tokens not seen yet and return the root's proposal (one row)."""

    @abstractmethod
    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        """The proposal after each of ``frontier``'s nodes (draft nodes below the root whose parents
        were proposed for earlier in this step), one row per node."""

    @abstractmethod
    def commit(self, new_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        """The target committed ``new_ids`` (accepted drafts then the bonus token) this step.
        ``target_hidden``: ``[len(new_ids), len(feature_layers), H]``, the target's states at the root
        and at each accepted draft, i.e. row i is the state that predicted ``new_ids[i]``.  ``None`` for a
        feature drafter means a speculative commit: it uses its own states for the drafted nodes."""

    _planned_rows: int | None = None

    def plan_rows(self, rows: int) -> None:
        """The most rows (committed tokens plus one tree) the next run will hold: a drafter whose
        caches can run on static runners (CUDA graphs, ``talon.engine.graphs``) takes them at the next
        ``reset`` (only that one, through ``take_planned_rows``)."""
        self._planned_rows = rows

    def take_planned_rows(self) -> int | None:
        """The rows ``plan_rows`` announced for this run (once; None afterwards or if none were)."""
        rows, self._planned_rows = self._planned_rows, None
        return rows

    def release(self) -> None:
        """Give back what the run borrowed (static runners); called when a run ends, and the drafter
        is ``reset`` before any further use.  No-op by default."""

    def rewind_step(self) -> None:
        """Forget the current step (its tree, and the root ``begin_step`` fed) so that ``begin_step``
        drafts the same step again from the same state: the tree lab rebuilds one step many times."""
        raise NotImplementedError(f"{self.name} cannot redraft a step")

    def observe(self, tree: DraftTree, accepted_path: Sequence[int]) -> None:
        """The verified tree and its accepted path (node ids from the root).  No-op by default."""

    def step_info(self) -> dict:
        """JSON-ready drafter state recorded with the step it drafted (``StepRecord.drafter_info``)."""
        return {}

    def checkpoint(self) -> int:
        """An opaque marker of the committed state (for ``rollback`` / ``confirm``)."""
        raise NotImplementedError(f"{self.name} cannot draft ahead (no checkpoint / rollback)")

    def rollback(self, checkpoint: int) -> None:
        """Forget every commit made after ``checkpoint`` (and the current tree)."""
        raise NotImplementedError(f"{self.name} cannot draft ahead (no checkpoint / rollback)")

    def confirm(self, checkpoint: int, target_hidden: torch.Tensor | None = None) -> None:
        """The tokens committed speculatively since ``checkpoint`` were right; ``target_hidden``
        (``[tokens, len(feature_layers), H]``) holds the target's true states for them.  No-op unless
        the drafter stood in its own states for the target's."""
