"""Drafter policies behind one interface.

A drafter answers one question, batched over a whole frontier of the tree being grown: *what are
the log-probabilities of the next token after each of these nodes?*  One ``propose`` call is one
drafter forward (the "delta" metric counts them).

Life cycle within a run::

    drafter.reset(prompt_ids)                 # once
    per step:
        drafter.propose(tree, [0])            # the root first: starts the step
        drafter.propose(tree, frontier) ...   # deeper layers, parents fed before children
        drafter.observe(tree, accepted_path)  # what the target accepted (adaptive drafters learn from it)
        drafter.commit(new_ids)               # the tokens the target committed (path + bonus)

Asynchronous decoding (``talon.decode``, ``execution="async"``) also drafts ahead from a guessed
outcome while the target verifies: ``checkpoint()`` before the guess, ``commit(guess)`` (a feature
drafter gets ``target_hidden=None`` and stands in its own states), then either ``rollback(checkpoint)``
when the guess was wrong or ``confirm(checkpoint, target_hidden)`` when it was right.

A feature-level drafter (EAGLE-style head) also needs the target's hidden states: it names the
layers in ``feature_layers`` and receives, for every position the target has processed, the target's
hidden states there (``reset`` for the prompt, ``commit`` for the root and the accepted drafts).
"""
from __future__ import annotations

import math
from abc import ABC, abstractmethod
from collections import Counter, defaultdict
from collections.abc import Iterator, Sequence

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
        and at each accepted draft, i.e. row i is the state that predicted ``new_ids[i]``.  ``None`` for a
        feature drafter means a speculative commit: it uses its own states for the drafted nodes."""

    def source_of(self, parent: int, token: int) -> str:
        """The ``DraftTree.source`` label of ``token`` proposed below node ``parent`` in the last
        ``propose`` call that covered ``parent``."""
        return self.source

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

    @property
    def can_draft_ahead(self) -> bool:
        """Whether it supports async decoding (overrides ``checkpoint`` and ``rollback``)."""
        return type(self).rollback is not Drafter.rollback

    def confirm(self, checkpoint: int, target_hidden: torch.Tensor | None = None) -> None:
        """The tokens committed speculatively since ``checkpoint`` were right; ``target_hidden``
        (``[tokens, len(feature_layers), H]``) holds the target's true states for them.  No-op unless
        the drafter stood in its own states for the target's."""


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

    def checkpoint(self) -> int:
        return len(self._seq)

    def rollback(self, checkpoint: int) -> None:
        del self._seq[checkpoint:]
        self._cached.crop_committed(checkpoint)


def _grams_before(seq: Sequence[int], end: int, max_ngram: int) -> Iterator[tuple[int, ...]]:
    """The n-grams (n = 1..``max_ngram``) of ``seq`` that end just before index ``end``."""
    return (tuple(seq[end - n:end]) for n in range(1, min(max_ngram, end) + 1))


def _ngram_index(sequences: Sequence[Sequence[int]], max_ngram: int) -> dict[tuple[int, ...], Counter]:
    """For every n-gram (n = 1..``max_ngram``) in ``sequences``, counts of the token that followed it."""
    index: dict[tuple[int, ...], Counter] = defaultdict(Counter)
    for seq in sequences:
        seq = [int(t) for t in seq]
        for end in range(1, len(seq)):
            for gram in _grams_before(seq, end, max_ngram):
                index[gram][seq[end]] += 1
    return index


class NgramDrafter(Drafter):
    """Prompt lookup over prompt + output (and an optional datastore) that proposes branches.

    For a node whose context (committed tokens + the tree path to it) ends in the n-gram g, with n
    tried from ``max_ngram`` down to 1, it counts which tokens followed earlier occurrences of g, first
    in the committed sequence, then in the datastore.  The first match wins; its continuation
    frequencies are the proposal (log count/total), so several continuations become sibling branches
    with frequency-based confidence.  No match: every token is ``-inf``.  Costs no model forward; the
    index over committed n-grams is updated on commit.

    ``datastore``: token sequences (e.g. a corpus of code or documents) whose n-grams are looked up
    after the sequence's own (REST-style retrieval); read-only, shared by runs."""

    name = "n-gram prompt lookup"
    source = SOURCE_RETRIEVAL

    def __init__(self, vocab_size: int, max_ngram: int = 3,
                 datastore: dict[tuple[int, ...], Counter] | None = None) -> None:
        if max_ngram < 1:
            raise ValueError("max_ngram must be >= 1")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.datastore = datastore or {}
        self._seq: list[int] = []
        self._index: dict[tuple[int, ...], Counter] = defaultdict(Counter)

    @classmethod
    def with_datastore(cls, vocab_size: int, sequences: Sequence[Sequence[int]], max_ngram: int = 3) -> "NgramDrafter":
        return cls(vocab_size, max_ngram, _ngram_index(sequences, max_ngram))

    def reset(self, prompt_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self._seq = []
        self._index = defaultdict(Counter)
        self._append(prompt_ids)

    def _append(self, ids: Sequence[int]) -> None:
        for token in ids:
            for gram in _grams_before(self._seq, len(self._seq), self.max_ngram):
                self._index[gram][int(token)] += 1
            self._seq.append(int(token))

    def continuations(self, context: Sequence[int]) -> Counter:
        """Counts of the tokens that followed the longest suffix of ``context`` seen before."""
        for n in range(min(self.max_ngram, len(context)), 0, -1):
            gram = tuple(context[-n:])
            counts = self._index.get(gram) or self.datastore.get(gram)
            if counts:
                return counts
        return Counter()

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> torch.Tensor:
        out = torch.full((len(frontier), self.vocab_size), -math.inf)
        for row, node in enumerate(frontier):
            counts = self.continuations(self._seq + tree.path_tokens(node))
            total = sum(counts.values())
            for token, count in counts.items():
                out[row, token] = math.log(count / total)
        return out

    def commit(self, new_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self._append(new_ids)

    def checkpoint(self) -> int:
        return len(self._seq)

    def rollback(self, checkpoint: int) -> None:
        while len(self._seq) > checkpoint:
            token = self._seq.pop()
            for gram in _grams_before(self._seq, len(self._seq), self.max_ngram):
                counts = self._index[gram]
                counts[token] -= 1
                if counts[token] <= 0:
                    del counts[token]
                if not counts:
                    del self._index[gram]


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

    def __init__(self, model: Drafter, retrieval: NgramDrafter, decay: float = 0.8, min_weight: float = 0.05) -> None:
        self.model, self.retrieval = model, retrieval
        self.name = f"hybrid: {model.name} + {retrieval.name}"
        self.feature_layers = model.feature_layers
        self.decay, self.min_weight = decay, min_weight
        self._counts = {SOURCE_MODEL: [0.0, 0.0], SOURCE_RETRIEVAL: [0.0, 0.0]}  # [reached, accepted]
        self._retrieval_tokens: dict[int, set[int]] = {}

    def reset(self, prompt_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self.model.reset(prompt_ids, target_hidden)
        self.retrieval.reset(prompt_ids)
        self._counts = {SOURCE_MODEL: [0.0, 0.0], SOURCE_RETRIEVAL: [0.0, 0.0]}
        self._retrieval_tokens = {}

    def acceptance(self, source: str) -> float:
        reached, accepted = self._counts[source]
        return (accepted + 1.0) / (reached + 2.0)

    @property
    def retrieval_weight(self) -> float:
        a_r, a_m = self.acceptance(SOURCE_RETRIEVAL), self.acceptance(SOURCE_MODEL)
        return min(max(a_r / (a_r + a_m), self.min_weight), 1.0 - self.min_weight)

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> torch.Tensor:
        if list(frontier) == [0]:
            self._retrieval_tokens = {}
        lp_model = self.model.propose(tree, frontier)
        lp_retrieval = self.retrieval.propose(tree, frontier).to(lp_model.device)
        w = self.retrieval_weight
        from_retrieval = lp_retrieval + math.log(w)
        from_model = lp_model + math.log1p(-w)
        matched = torch.isfinite(lp_retrieval).any(dim=1, keepdim=True)
        mixed = torch.where(matched, torch.logaddexp(from_retrieval, from_model), lp_model)
        wins = (from_retrieval > from_model) & matched
        for row, node in enumerate(frontier):
            self._retrieval_tokens[node] = set(wins[row].nonzero().flatten().tolist())
        return mixed

    def source_of(self, parent: int, token: int) -> str:
        return SOURCE_RETRIEVAL if token in self._retrieval_tokens.get(parent, ()) else SOURCE_MODEL

    def observe(self, tree: DraftTree, accepted_path: Sequence[int]) -> None:
        for counts in self._counts.values():
            counts[0] *= self.decay
            counts[1] *= self.decay
        on_path = set(accepted_path)
        for node in range(1, len(tree)):
            if tree.parent[node] in on_path:  # verification checked this node
                counts = self._counts[tree.source[node]]
                counts[0] += 1.0
                counts[1] += float(node in on_path)
        self.model.observe(tree, accepted_path)

    def step_info(self) -> dict:
        return {"retrieval_weight": round(self.retrieval_weight, 4),
                "retrieval_acceptance": round(self.acceptance(SOURCE_RETRIEVAL), 4),
                "model_acceptance": round(self.acceptance(SOURCE_MODEL), 4)}

    def commit(self, new_ids: Sequence[int], target_hidden: torch.Tensor | None = None) -> None:
        self.model.commit(new_ids, target_hidden)
        self.retrieval.commit(new_ids)

    def checkpoint(self) -> int:
        return self.retrieval.checkpoint()  # both hold the same committed sequence

    def rollback(self, checkpoint: int) -> None:
        self.model.rollback(checkpoint)
        self.retrieval.rollback(checkpoint)

    def confirm(self, checkpoint: int, target_hidden: torch.Tensor | None = None) -> None:
        self.model.confirm(checkpoint, target_hidden)


DRAFTER_HELP = ("'head' (the trained draft head shipped for the embedded target), 'head:DIR_OR_HUB_ID', "
                "'ngram' (prompt lookup), 'layers:K' (the target's first K layers), 'hybrid:SPEC' (SPEC merged "
                "with prompt lookup), or a local directory / Hugging Face id of a small LM with the target's "
                "tokenizer")


def make_drafter(spec: str, target: LoadedModel, registry=None) -> Drafter:
    """A fresh drafter (per-run state) for ``spec`` (see ``DRAFTER_HELP``).  Models and heads come
    from ``registry`` (a ``talon.models.ModelRegistry``) so they are loaded once; a private one is
    used when none is given."""
    from .config import ConfigError
    from .head import HeadDrafter
    from .models import ModelRegistry, check_same_tokenizer, truncated_copy

    registry = registry or ModelRegistry()
    spec = (spec or "").strip()
    vocab = target.model.get_output_embeddings().weight.shape[0]
    if spec == "ngram":
        return NgramDrafter(vocab)
    if spec.startswith("hybrid:"):
        return _hybrid(make_drafter(spec.split(":", 1)[1], target, registry), vocab)
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


def drafter_for(method: str, spec: str, target: LoadedModel, registry=None,
                datastore: Sequence[Sequence[int]] | None = None) -> Drafter | None:
    """The drafter a decoding ``method`` runs with: ``None`` for ``ar``; for ``hybrid`` the drafter of
    ``spec`` merged with prompt lookup (over ``datastore`` too, token sequences, when given); else
    ``make_drafter(spec)``."""
    if method == "ar":
        return None
    drafter = make_drafter(spec, target, registry)
    if method != "hybrid" or isinstance(drafter, HybridDrafter):
        return drafter
    return _hybrid(drafter, target.model.get_output_embeddings().weight.shape[0], datastore)


def _hybrid(model: Drafter, vocab: int, datastore: Sequence[Sequence[int]] | None = None) -> HybridDrafter:
    """``model`` merged with prompt lookup (over ``datastore`` too, when given); refuses n-gram as the
    model side (it would be retrieval twice)."""
    from .config import ConfigError

    if isinstance(model, NgramDrafter):
        raise ConfigError("The hybrid method merges a model drafter with prompt lookup: pick the trained head, "
                          "a self-draft ('layers:K') or a draft model as the drafter, not n-gram.")
    retrieval = NgramDrafter.with_datastore(vocab, datastore) if datastore else NgramDrafter(vocab)
    return HybridDrafter(model, retrieval)
