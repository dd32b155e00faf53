"""Prompt lookup (and REST-style datastore retrieval) as a drafter: proposals copied from what followed
the same n-gram before.  Costs no model forward."""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterator, Mapping, Sequence

import torch

from ..models.device import to_device
from ..tree import SOURCE_RETRIEVAL, DraftTree
from .base import Drafter, Proposal, common_prefix

MAX_NGRAM = 3
"""The longest n-gram looked up (then shorter ones down to 1)."""
MAX_CONTINUATIONS = 64
"""At most this many continuations of a match are proposed, the most frequent (a short n-gram of a large
datastore can have thousands; REST keeps about as many)."""


def grams_before(seq: Sequence[int], end: int, max_ngram: int) -> Iterator[tuple[int, ...]]:
    """The n-grams (n = 1..``max_ngram``) of ``seq`` that end just before index ``end``."""
    return (tuple(seq[end - n : end]) for n in range(1, min(max_ngram, end) + 1))


class NgramDrafter(Drafter):
    """Prompt lookup over prompt + output (and an optional datastore) that proposes branches.

    For a node whose context (committed tokens + the tree path to it) ends in the n-gram g, with n
    tried from ``max_ngram`` down to 1, it counts which tokens followed earlier occurrences of g, first
    in the committed sequence, then in the datastore.  The first match wins; its continuation
    frequencies are the proposal (log count/total), so several continuations become sibling branches
    with frequency-based confidence.  No match: every token is ``-inf``.  Costs no model forward; the
    index over committed n-grams follows the sequence each ``begin_step`` is handed.

    ``datastore``: the n-gram index of a corpus (``talon.drafters.datastore``), looked up after the
    sequence's own (REST-style retrieval); read-only, shared by runs.  ``device``: where the
    proposal rows are made (the target's, so a GPU run copies no dense row from the host)."""

    name = "n-gram prompt lookup"
    can_draft_ahead = True

    def __init__(
        self,
        vocab_size: int,
        max_ngram: int = MAX_NGRAM,
        datastore: Mapping[tuple[int, ...], Counter] | None = None,
        device: torch.device | str = "cpu",
    ) -> None:
        if max_ngram < 1:
            raise ValueError("max_ngram must be >= 1")
        self.vocab_size = vocab_size
        self.max_ngram = max_ngram
        self.datastore = datastore or {}
        self.device = torch.device(device)
        self._seq: list[int] = []
        self._index: dict[tuple[int, ...], Counter] = defaultdict(Counter)

    def start(
        self, prompt_ids: Sequence[int], target_features: torch.Tensor | None = None, rows: int | None = None
    ) -> None:
        self._seq = []
        self._index = defaultdict(Counter)
        self._append(prompt_ids)

    def _append(self, ids: Sequence[int]) -> None:
        for token in ids:
            for gram in grams_before(self._seq, len(self._seq), self.max_ngram):
                self._index[gram][int(token)] += 1
            self._seq.append(int(token))

    def longest_match(self, context: Sequence[int]) -> tuple[Counter, int]:
        """The continuations of the longest suffix of ``context`` seen before, and that suffix's length
        (0 and no counts when nothing matched)."""
        for n in range(min(self.max_ngram, len(context)), 0, -1):
            gram = tuple(context[-n:])
            counts = self._index.get(gram) or self.datastore.get(gram)
            if counts:
                return counts, n
        return Counter(), 0

    def begin_step(self, committed_ids: Sequence[int], target_features: torch.Tensor | None = None) -> Proposal:
        lcp = common_prefix(self._seq, committed_ids)
        self._pop_to(lcp)
        self._append(committed_ids[lcp:])
        return self._lookup([[]])

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        return self._lookup([tree.path_tokens(node) for node in frontier])

    def _lookup(self, paths: Sequence[Sequence[int]]) -> Proposal:
        """One row per ``paths[k]`` (the draft tokens below the root): what followed the context
        (committed sequence, then that path) before."""
        rows, tokens, logprobs, lengths = [], [], [], []
        tail = self._seq[-self.max_ngram :]  # only the last max_ngram tokens of a context are looked up
        for row, path in enumerate(paths):
            counts, n = self.longest_match((tail + list(path))[-self.max_ngram :])
            lengths.append(n)
            total = sum(counts.values())
            top = counts.most_common(MAX_CONTINUATIONS) if len(counts) > MAX_CONTINUATIONS else counts.items()
            for token, count in top:
                rows.append(row)
                tokens.append(token)
                logprobs.append(math.log(count / total))
        out = torch.full((len(paths), self.vocab_size), -math.inf, device=self.device)
        if rows:
            index = to_device([rows, tokens], torch.long, self.device)
            out[index[0], index[1]] = to_device(logprobs, torch.float32, self.device)
        return Proposal(out, SOURCE_RETRIEVAL, match=lengths)

    def _pop_to(self, length: int) -> None:
        """Forget the tokens after the first ``length`` (and their n-grams in the index)."""
        while len(self._seq) > length:
            token = self._seq.pop()
            for gram in grams_before(self._seq, len(self._seq), self.max_ngram):
                counts = self._index[gram]
                counts[token] -= 1
                if counts[token] <= 0:
                    del counts[token]
                if not counts:
                    del self._index[gram]
