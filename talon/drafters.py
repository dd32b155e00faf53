"""Drafter policies behind one interface.

A drafter answers one question, batched over a whole frontier of the tree being grown: *what are
the log-probabilities of the next token after each of these nodes?*  One ``propose`` call is one
drafter forward (the "delta" metric counts them).

Life cycle within a run::

    drafter.reset(prompt_ids)                 # once
    per step:
        drafter.propose(tree, [0])            # the root first: starts the step
        drafter.propose(tree, frontier) ...   # deeper layers, parents fed before children
        drafter.commit(new_ids)               # the tokens the target committed (path + bonus)

A feature-level drafter (EAGLE-style head) also needs the target's hidden states: it names the
layers in ``feature_layers`` and receives, for every position the target has processed, the target's
hidden states there (``reset`` for the prompt, ``commit`` for the root and the accepted drafts).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import Sequence

import torch

from .cached_lm import CachedLM
from .models import LoadedModel
from .tree import SOURCE_MODEL, SOURCE_RETRIEVAL, DraftTree


class Drafter(ABC):
    """Strategy interface for drafters; a new drafting method is one new subclass."""

    name: str = "drafter"
    source: str = SOURCE_MODEL
    """Which ``DraftTree.source`` label the nodes it proposes get."""
    feature_layers: tuple[int, ...] = ()
    """Target hidden states this drafter needs (0 = embeddings, i = output of decoder layer i)."""

    @abstractmethod
    def reset(self, prompt_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        """Start a new run whose committed tokens so far are ``prompt_ids`` (last one = first root).
        ``target_hidden``: ``[len(prompt_ids) - 1, len(feature_layers), H]``, the target's states at
        every prompt position but the last (only when ``feature_layers`` is non-empty)."""

    @abstractmethod
    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> torch.Tensor:
        """Next-token log-probabilities after each frontier node: float32 ``[len(frontier), vocab]``
        (``-inf`` for tokens it will not propose).  ``frontier == [0]`` starts a step."""

    @abstractmethod
    def commit(self, new_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        """The target committed ``new_ids`` (accepted drafts then the bonus token) this step.
        ``target_hidden``: ``[len(new_ids), len(feature_layers), H]``, the target's states at the root
        and at each accepted draft, i.e. row i is the state that predicted ``new_ids[i]``."""


class ModelDrafter(Drafter):
    """A small causal LM sharing the target's tokenizer, with its own KV cache and tree masks.

    At the start of a step the committed tokens it has not seen (the accepted path and the bonus
    token; the whole prompt at the first step) are fed in one causal forward; that forward also
    yields the root's distribution.  Tree nodes are then fed layer by layer with ancestor masks, and
    after the step the cache is cropped back to the committed prefix."""

    def __init__(self, lm: LoadedModel) -> None:
        self.lm = lm
        self.name = lm.name
        self._cached: CachedLM | None = None
        self._seq: list[int] = []

    def reset(self, prompt_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self._cached = CachedLM(self.lm)
        self._seq = list(prompt_ids)

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> torch.Tensor:
        cached = self._cached
        if list(frontier) == [0]:
            pending = self._seq[cached.committed_len:]
            logits = cached.extend_committed(pending)[0][-1:]
        else:
            root_position = len(self._seq) - 1
            logits = cached.forward_nodes(tree, frontier, root_position)[0]
        return torch.log_softmax(logits, dim=-1)

    def commit(self, new_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self._cached.drop_tree()
        self._seq.extend(int(t) for t in new_ids)


class NgramDrafter(Drafter):
    """Prompt lookup over prompt + output that proposes branches.

    For a node whose context (committed tokens + the tree path to it) ends in the n-gram g, with n
    tried from ``max_ngram`` down to 1, it looks up every earlier occurrence of g in the committed
    sequence and counts which tokens followed it.  The first n with any occurrence wins; its
    continuation frequencies are the proposal (log count/total), so several continuations become
    sibling branches with frequency-based confidence.  No occurrence: every token is ``-inf``.
    Costs no model forward; an index over committed n-grams is updated on commit."""

    name = "n-gram prompt lookup"
    source = SOURCE_RETRIEVAL

    def __init__(self, vocab_size: int, max_ngram: int = 3) -> None:
        if max_ngram < 1:
            raise ValueError("max_ngram must be >= 1")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self._seq: list[int] = []
        self._index: dict[tuple[int, ...], Counter] = defaultdict(Counter)

    def reset(self, prompt_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self._seq = []
        self._index = defaultdict(Counter)
        self._append(prompt_ids)

    def _append(self, ids: Sequence[int]) -> None:
        for token in ids:
            end = len(self._seq)  # the new token sits at index `end`
            for n in range(1, self.max_ngram + 1):
                if end - n >= 0:
                    self._index[tuple(self._seq[end - n:end])][int(token)] += 1
            self._seq.append(int(token))

    def continuations(self, context: Sequence[int]) -> Counter:
        """Counts of the tokens that followed the longest suffix of ``context`` seen before."""
        for n in range(min(self.max_ngram, len(context)), 0, -1):
            counts = self._index.get(tuple(context[-n:]))
            if counts:
                return counts
        return Counter()

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> torch.Tensor:
        out = torch.full((len(frontier), self.vocab_size), -math.inf)
        for row, node in enumerate(frontier):
            path = []
            while node > 0:
                path.append(tree.token[node])
                node = tree.parent[node]
            counts = self.continuations(self._seq + path[::-1])
            total = sum(counts.values())
            for token, count in counts.items():
                out[row, token] = math.log(count / total)
        return out

    def commit(self, new_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self._append(new_ids)


DRAFTER_HELP = ("'head' (the trained draft head shipped for the embedded target), 'head:DIR_OR_HUB_ID', "
                "'ngram' (prompt lookup), 'layers:K' (the target's first K layers), or a local directory / "
                "Hugging Face id of a small LM with the target's tokenizer")


def make_drafter(spec: str, target: LoadedModel, registry=None) -> Drafter:
    """A fresh drafter (per-run state) for ``spec`` (see ``DRAFTER_HELP``).  Models and heads come
    from ``registry`` (a ``talon.models.ModelRegistry``) so they are loaded once; a private one is
    used when none is given."""
    from .config import ConfigError
    from .head import HeadDrafter
    from .models import ModelRegistry, check_same_tokenizer, truncated_copy

    registry = registry or ModelRegistry()
    spec = (spec or "").strip()
    if spec == "ngram":
        return NgramDrafter(target.model.get_output_embeddings().weight.shape[0])
    if spec.startswith("layers:"):
        try:
            k = int(spec.split(":", 1)[1])
        except ValueError as err:
            raise ConfigError(f"Drafter {spec!r}: K in 'layers:K' must be a whole number.") from err
        return ModelDrafter(truncated_copy(target, k))
    if spec == "head" or spec.startswith("head:"):
        head_spec = spec.split(":", 1)[1] if ":" in spec else ""
        head, name = registry.get_head(head_spec, target)
        return HeadDrafter(head, target, name)
    if not spec:
        raise ConfigError(f"No drafter given: use {DRAFTER_HELP}.")
    lm = registry.get(spec)
    check_same_tokenizer(target, lm)
    return ModelDrafter(lm)
