"""The one definition of every metric (design section 4).  Pure functions of traces; torch-free."""

from __future__ import annotations

import json
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
        rates.append(sum(s.accepted_tokens >= d for s in reached) / len(reached))
    return rates


def tokens_per_second(trace: RunTrace) -> float:
    """Generated tokens per wall-clock second (prefill included in the time)."""
    return len(trace.output_ids) / trace.seconds if trace.seconds > 0 else 0.0


def draft_share(trace: RunTrace) -> float:
    """Share of the steps' wall time spent building draft trees (the tree-construction overhead,
    drafter forwards included)."""
    total = step_seconds(trace)
    return sum(s.draft_seconds for s in trace.steps) / total if total > 0 else 0.0


def mean_tree_depth(steps: Sequence[StepRecord]) -> float:
    """Mean over steps of the deepest draft layer the tree reached (0 for autoregressive)."""
    return sum(s.tree.max_depth for s in steps) / len(steps) if steps else 0.0


def mean_tree_nodes(steps: Sequence[StepRecord]) -> float:
    """Mean over steps of the draft nodes per tree, root excluded (what the budget N counts)."""
    return sum(s.tree.num_drafts for s in steps) / len(steps) if steps else 0.0


def mean_expected(steps: Sequence[StepRecord]) -> float | None:
    """Mean over steps of the expected committed tokens (bonus included) by calibrated confidence
    (None when the steps have none: old traces)."""
    values = [s.expected for s in steps if s.expected is not None]
    return sum(values) / len(values) if values and len(values) == len(steps) else None


def mean_realised(steps: Sequence[StepRecord]) -> float | None:
    """Mean over steps of the drafts accepted + 1 (the bonus): what ``mean_expected`` predicts (tokens
    cut at the end of the output still count here)."""
    return sum(s.accepted_tokens + 1 for s in steps) / len(steps) if steps else None


def mean_price(steps: Sequence[StepRecord]) -> float | None:
    """Mean step price in plain decoding steps (None when the run had no cost curve)."""
    values = [s.price for s in steps if s.price is not None]
    return sum(values) / len(values) if values and len(values) == len(steps) else None


def plain_share(steps: Sequence[StepRecord]) -> float | None:
    """Share of steps whose tree was the root alone (a plain decoding step)."""
    return sum(len(s.tree) == 1 for s in steps) / len(steps) if steps else None


def mean_layer_widths(steps: Sequence[StepRecord]) -> list[float]:
    """``widths[d - 1]`` for depth d >= 1: draft nodes at depth d per step, averaged over *all* steps
    (a tree that stops above d counts 0), so ``sum(widths) == mean_tree_nodes(steps)``."""
    deepest = max((s.tree.max_depth for s in steps), default=0)
    totals = [0] * deepest
    for s in steps:
        for d, width in enumerate(s.layer_widths[1:]):
            totals[d] += width
    return [t / len(steps) for t in totals]


def step_seconds(trace: RunTrace) -> float:
    """Wall time of the decoding steps (drafting, verification, bookkeeping), prefill excluded: the
    time the draft share is a share of."""
    return sum(s.step_seconds for s in trace.steps)


def pooled(rows: Sequence[dict]) -> dict:
    """Headline numbers pooled over several runs (dicts with ``new_tokens``, ``target_forwards``,
    ``draft_forwards``, ``seconds``, ``draft_seconds`` and optionally ``step_seconds``,
    ``mean_depth``, ``mean_tree_nodes``, ``mean_layer_widths``): ratios of sums, so a long run weighs
    more than a short one, and per-step means weighted by each run's target forwards (over the runs
    that have them: a transformers peer has no trees, so its ``mean_depth`` is None and left out)."""
    forwards = sum(r["target_forwards"] for r in rows)
    tokens = sum(r["new_tokens"] for r in rows)
    seconds = sum(r["seconds"] for r in rows)
    step_total = sum(r.get("step_seconds", r["seconds"]) for r in rows)

    def per_step(key: str) -> float | None:
        have = [(r[key], r["target_forwards"]) for r in rows if r.get(key) is not None]
        steps = sum(n for _, n in have)
        return sum(v * n for v, n in have) / steps if steps else None

    deepest = max((len(r.get("mean_layer_widths") or []) for r in rows), default=0)
    widths = [
        sum(
            (r["mean_layer_widths"][d] if d < len(r.get("mean_layer_widths") or []) else 0.0) * r["target_forwards"]
            for r in rows
        )
        / forwards
        if forwards
        else 0.0
        for d in range(deepest)
    ]
    return {
        "prompts": len(rows),
        "new_tokens": tokens,
        "target_forwards": forwards,
        "seconds": seconds,
        "MAT": tokens / forwards if forwards else 0.0,
        "delta": sum(r["draft_forwards"] for r in rows) / forwards if forwards else 0.0,
        "tokens_per_s": tokens / seconds if seconds else 0.0,
        "draft_share": sum(r["draft_seconds"] for r in rows) / step_total if step_total else 0.0,
        "mean_depth": per_step("mean_depth"),
        "mean_tree_nodes": per_step("mean_tree_nodes"),
        "mean_layer_widths": widths,
    }


def speedup(ar_seconds: float, method_seconds: float) -> float:
    """Wall time of plain autoregressive decoding / wall time of the method, for the same prompts
    measured on the same machine in the same run."""
    return ar_seconds / method_seconds if method_seconds > 0 else 0.0


def speculation_hit_rate(trace: RunTrace) -> float | None:
    """Async mode: share of the steps whose speculative next tree was right (``None`` for sync runs)."""
    done = [s.speculate_hit for s in trace.steps if s.speculate_hit is not None]
    return sum(done) / len(done) if done else None


def projected_async_seconds(trace: RunTrace, hit_rate: float) -> float:
    """Wall time ``trace``'s phases would take with drafting overlapped with verification on hardware
    where drafter and target truly run at once (no shared cores), given a speculation ``hit_rate``.

    Step k's draft runs during step k-1's verification: a right guess hides it except the part longer
    than that verification, a wrong one leaves the step to draft again (expected over ``hit_rate``).
    The target also waits for a speculation longer than its verification.  Built from a sync trace's
    measured phase times (in an async trace a right guess already hid its draft); an upper bound on the
    saving, since it ignores the extra forward for the guessed bonus token."""
    steps = trace.steps
    if not steps:
        return trace.prefill_seconds
    total = trace.prefill_seconds + steps[0].draft_seconds + sum(s.verify_seconds for s in steps)
    for prev, step in zip(steps, steps[1:]):
        excess = max(0.0, step.draft_seconds - prev.verify_seconds)
        total += excess + (1.0 - hit_rate) * step.draft_seconds
    return total


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
        "mean_tree_nodes": mean_tree_nodes(steps),
        "acceptance_by_depth": acceptance_by_depth(steps),
        "speculation_hit_rate": speculation_hit_rate(trace),
    }


def trace_json(trace: RunTrace, indent: int | None = None) -> str:
    """The trace's JSON (``RunTrace.to_json``) with its ``summarize`` numbers under ``"summary"``
    (derived, ignored by ``RunTrace.from_json``): what the app exports."""
    return json.dumps({**trace.to_dict(), "summary": summarize(trace)}, indent=indent, ensure_ascii=False)
