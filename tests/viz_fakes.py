"""Synthetic steps and traces for the viz tests (no model): random trees, consistent verdicts."""

from __future__ import annotations

import math
import random

from talon.trace import RunTrace, StepRecord
from talon.tree import DraftTree

WORDS = [
    " the",
    " cat",
    ",",
    "\n",
    " <b>",
    "&amp;",
    "\t",
    "ing",
    " supercalifragilistic",
    "<|im_end|>",
    " a",
    ".",
    " dog",
    "s",
    ' "x"',
    "é",
]


def random_parents(n: int, rng: random.Random, wide: float = 0.5) -> list[int]:
    """A random parent array of ``n`` nodes (parents before children); ``wide`` = chance that a
    node hangs off any earlier node rather than one of the last three (deep chains)."""
    return [-1] + [rng.randrange(i) if rng.random() < wide else rng.randrange(max(0, i - 3), i) for i in range(1, n)]


def random_step(
    n: int, seed: int = 0, index: int = 0, wide: float = 0.5, parents: list[int] | None = None
) -> StepRecord:
    """A step over a random tree of ``n`` nodes (root included) with greedy-style verdicts."""
    rng = random.Random(seed)
    parent = parents if parents is not None else random_parents(n, rng, wide)
    tree = DraftTree.with_root(7)
    for i in range(1, len(parent)):
        tree.add(
            parent[i],
            rng.randrange(1000),
            math.log(rng.uniform(0.01, 1.0)),
            "retrieval" if rng.random() < 0.3 else "model",
        )
    kids = [[] for _ in range(len(tree))]
    for i in range(1, len(tree)):
        kids[tree.parent[i]].append(i)
    path = [0]
    while kids[path[-1]] and rng.random() < 0.7:
        path.append(rng.choice(kids[path[-1]]))
    status = ["not reached"] * len(tree)
    status[0] = "root"
    for v in path:
        for c in kids[v]:
            status[c] = "rejected"
    for v in path[1:]:
        status[v] = "accepted"
    node_text = [rng.choice(WORDS) for _ in range(len(tree))]
    target_text = [""] * len(tree)
    target_token = [-1] * len(tree)
    for k, v in enumerate(path):
        nxt = path[k + 1] if k + 1 < len(path) else None
        target_text[v] = node_text[nxt] if nxt is not None else rng.choice(WORDS) + "!"
        target_token[v] = tree.token[nxt] if nxt is not None else 999
    committed_text = "".join(node_text[v] for v in path[1:]) + target_text[path[-1]]
    return StepRecord(
        index=index,
        tree=tree,
        status=status,
        accepted_path=path,
        bonus_token=999,
        target_token=target_token,
        target_prob=[1.0] + [rng.random() for _ in range(len(tree) - 1)],
        committed_ids=[tree.token[v] for v in path[1:]] + [999],
        committed_text=committed_text,
        node_text=node_text,
        target_text=target_text,
        draft_start=0.1 * index,
        draft_seconds=0.01,
        verify_start=0.1 * index + 0.01,
        verify_seconds=0.05,
        drafter_forwards=tree.max_depth,
    )


def random_trace(steps: int = 5, n: int = 30, seed: int = 0) -> RunTrace:
    """A trace of ``steps`` random steps of ``n`` nodes each."""
    return RunTrace(
        prompt="p",
        prompt_ids=[1, 2],
        tree_config={"method": "talon"},
        decode_config={},
        target="t",
        drafter="d",
        device="cpu",
        steps=[random_step(n, seed + k, index=k) for k in range(steps)],
    )
