"""The one definition of every metric (design section 4).  Pure functions of traces; torch-free."""
from __future__ import annotations

from collections.abc import Sequence

from .trace import RunTrace, StepRecord


def mat(steps: Sequence[StepRecord]) -> float:
    """MAT (tau): tokens committed per target forward, bonus token included (autoregressive = 1)."""
    return sum(len(s.committed_ids) for s in steps) / len(steps) if steps else 0.0


def delta(steps: Sequence[StepRecord]) -> float:
    """Drafter forwards per target forward."""
    return sum(s.drafter_forwards for s in steps) / len(steps) if steps else 0.0


def acceptance_by_depth(steps: Sequence[StepRecord]) -> list[float]:
    """``rate[d - 1]`` for depth d >= 1: of the steps whose tree reached depth d, the share that
    accepted a node at depth d."""
    deepest = max((s.tree.max_depth for s in steps), default=0)
    rates = []
    for d in range(1, deepest + 1):
        reached = [s for s in steps if s.tree.max_depth >= d]
        rates.append(sum(s.accepted_depth >= d for s in reached) / len(reached))
    return rates


def tokens_per_second(trace: RunTrace) -> float:
    """Generated tokens per wall-clock second (prefill included in the time)."""
    return len(trace.output_ids) / trace.seconds if trace.seconds > 0 else 0.0


def draft_share(trace: RunTrace) -> float:
    """Share of the steps' wall time spent building draft trees (the tree-construction overhead,
    drafter forwards included)."""
    draft = sum(s.draft_seconds for s in trace.steps)
    total = draft + sum(s.verify_seconds for s in trace.steps)
    return draft / total if total > 0 else 0.0


def speedup(ar_seconds: float, method_seconds: float) -> float:
    """Wall time of plain autoregressive decoding / wall time of the method, for the same prompts
    measured on the same machine in the same run."""
    return ar_seconds / method_seconds if method_seconds > 0 else 0.0


def summarize(trace: RunTrace) -> dict:
    """The headline numbers of one run."""
    steps = trace.steps
    return {
        "new_tokens": len(trace.output_ids),
        "target_forwards": len(steps),
        "draft_forwards": sum(s.drafter_forwards for s in steps),
        "mat": mat(steps),
        "delta": delta(steps),
        "seconds": trace.seconds,
        "tokens_per_second": tokens_per_second(trace),
        "draft_share": draft_share(trace),
        "mean_tree_nodes": sum(s.tree.num_drafts for s in steps) / len(steps) if steps else 0.0,
        "acceptance_by_depth": acceptance_by_depth(steps),
    }
