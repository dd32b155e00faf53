"""Async speculation: while the target verifies a tree, the drafter guesses the outcome and drafts the
next tree from it on a worker thread (``talon.engine.decode.run`` with ``execution="async"``)."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass

import torch

from ..drafters.base import Drafter
from ..tree import DraftTree
from .builders import BuildResult, TreeBuilder
from .sizing import CostRule


def likely_outcome(tree: DraftTree) -> list[int]:
    """The drafter's guess at the outcome of verifying ``tree``: the node ``u`` that maximises the
    drafter's probability of "the target accepts the path to ``u``, then emits as bonus the drafter's
    best token outside ``u``'s children", ``p(path to u) * b(u)``.  Node ids from the root to ``u``.

    ``b(u)``, the best outside token's draft probability, is bounded by ``u``'s least likely child and
    by the mass its children leave; a leaf was never expanded, so it gets the drafter's typical
    confidence in this tree (the mean best-child probability of the expanded nodes).  Scoring only the
    chance to *stop* at ``u`` instead would favour the root of a wide tree, whose bonus must be a token
    the drafter ranked below all K root children and is almost never the target's."""
    n = len(tree)
    child_mass, least, best = [0.0] * n, [1.0] * n, [0.0] * n
    for node in range(1, n):
        q = math.exp(tree.draft_logprob[node])
        parent = tree.parent[node]
        child_mass[parent] += q
        least[parent], best[parent] = min(least[parent], q), max(best[parent], q)
    expanded = [u for u in range(n) if child_mass[u] > 0.0]
    typical = sum(best[u] for u in expanded) / len(expanded) if expanded else 0.5

    def bonus(u: int) -> float:
        return min(least[u], max(0.0, 1.0 - child_mass[u])) if child_mass[u] > 0.0 else typical

    return tree.path_to(max(range(n), key=lambda u: (math.exp(tree.path_logprob[u]) * bonus(u), -u)))


@dataclass
class Speculation:
    """The next step's tree drafted while the target verified this one, from a guessed outcome."""

    guess: list[int]  # the committed tokens it assumed (path tokens, then the guessed bonus)
    built: BuildResult | None  # the next tree, None if no guess could be made
    start: float  # seconds since the run started
    seconds: float
    drafter_info: dict


def best_outside(logprobs: torch.Tensor | None, exclude: Sequence[int]) -> int | None:
    """Most likely token of ``logprobs`` (``[vocab]``) not in ``exclude``; None if none is finite."""
    if logprobs is None:
        return None
    logprobs = logprobs.clone()
    if exclude:
        logprobs[list(exclude)] = -math.inf
    return int(logprobs.argmax()) if torch.isfinite(logprobs).any() else None


def speculate(
    drafter: Drafter,
    builder: TreeBuilder,
    built: BuildResult,
    committed: list[int],
    target_features: torch.Tensor | None,
    stream: torch.cuda.Stream | None,
    clock0: float,
    rule: CostRule | None = None,
    tokens_left: int | None = None,
) -> Speculation:
    """Worker side of async mode: guess the outcome of verifying ``built.tree`` (``likely_outcome``,
    then as bonus the drafter's best token there that the tree does not already hold) and build the
    next tree at ``committed`` + that guess.  ``committed``: the committed sequence the tree was built
    at (its root last); ``target_features``: the target's states before that root (the drafter stands in
    its own for the guessed positions).  One more drafter forward than a synchronous step when the guess
    goes below the root.  ``stream``: the run's side CUDA stream (``None`` on a CPU).  ``tokens_left``:
    new tokens the run may still commit at ``committed`` (None: no limit); the next tree is no deeper
    than the guess leaves room for."""
    t0 = time.perf_counter()
    tree = built.tree
    stop = likely_outcome(tree)[-1]
    path_tokens = tree.path_tokens(stop)
    children = [tree.token[c] for c in tree.children(stop)]
    guess, next_built, info = [], None, {}
    with torch.inference_mode(), torch.cuda.stream(stream) if stream is not None else nullcontext():
        logprobs = built.root_logprobs
        if path_tokens:
            logprobs = drafter.begin_step(committed + path_tokens, target_features).logprobs[0]
        bonus = best_outside(logprobs, children)
        if bonus is not None:
            guess = path_tokens + [bonus]
            max_depth = None if tokens_left is None else tokens_left - len(guess) - 1
            next_built = builder.build(drafter, committed + guess, target_features, rule=rule, max_depth=max_depth)
            next_built.drafter_forwards += 1 if path_tokens else 0
            info = drafter.step_info()
        if stream is not None:
            stream.synchronize()
    return Speculation(guess, next_built, t0 - clock0, time.perf_counter() - t0, info)
