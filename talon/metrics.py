"""The one definition of every metric (design section 4).  Pure functions of traces; torch-free."""

from __future__ import annotations

import json
import math
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


def acceptance_per_depth(steps: Sequence[StepRecord]) -> list[dict]:
    """Acceptance per depth, both rates, one row per depth d >= 1 (down to the deepest tree):

    * ``reached``: steps whose tree has a node at depth d;
    * ``accepted``: steps that accepted a node at depth d (``accepted_tokens >= d``);
    * ``checked``: steps whose accepted node at depth d - 1 (the root for d = 1) has children, i.e. the
      target checked depth d because everything above it was accepted;
    * ``ran_out``: steps whose accepted node at depth d - 1 has no children: every draft above was
      accepted and the tree had nothing left to offer at d (the tree, not the drafter, ended it);
    * ``rate`` = accepted / reached (``acceptance_by_depth``), ``conditional`` = accepted / checked (the
      drafter's acceptance at d given d - 1 was accepted); None where the denominator is 0.

    ``checked + ran_out`` is the number of steps that accepted everything down to d - 1."""
    deepest = max((s.tree.max_depth for s in steps), default=0)
    parent_sets = [set(s.tree.parent[1:]) for s in steps]
    rows = []
    for d in range(1, deepest + 1):
        reached = accepted = checked = ran_out = 0
        for s, parents in zip(steps, parent_sets):
            reached += s.tree.max_depth >= d
            accepted += s.accepted_tokens >= d
            if s.accepted_tokens >= d - 1:
                has_children = s.accepted_path[d - 1] in parents
                checked += has_children
                ran_out += not has_children
        rows.append(
            {
                "depth": d,
                "reached": reached,
                "accepted": accepted,
                "checked": checked,
                "ran_out": ran_out,
                "rate": accepted / reached if reached else None,
                "conditional": accepted / checked if checked else None,
            }
        )
    return rows


CHAIN_MIN_LENGTH = 2
"""A tree counts as collapsed into a chain when its part below the first layer is a single path of at
least this many nodes (``chain_collapsed``)."""
CHAIN_METHODS = ("talon", "hybrid", "eagle2", "static")
"""The methods whose trees may branch below the first layer, so a chain among them is worth a badge (the
chain method is a chain by design)."""


def chain_collapsed(step: StepRecord) -> bool:
    """Whether the step's tree collapsed into a chain: below its first layer (the root's children, which
    K fixes) every layer holds one node, over at least ``CHAIN_MIN_LENGTH`` layers.  The budget then went
    into one long guess instead of alternatives, which pays only while the drafter stays right."""
    widths = step.tree.layer_widths()
    return len(widths) - 2 >= CHAIN_MIN_LENGTH and all(w == 1 for w in widths[2:])


def collapsed_steps(trace: RunTrace) -> list[int]:
    """Indices (from 0) of the steps whose tree collapsed into a chain, for a method that may branch
    (``CHAIN_METHODS``); empty for the others."""
    if trace.tree_config.get("method") not in CHAIN_METHODS:
        return []
    return [s.index for s in trace.steps if chain_collapsed(s)]


def shape_stats(steps: Sequence[StepRecord]) -> dict:
    """The shape of a run's trees, per step: ``mean_depth`` (draft layers), ``mean_widest`` (the widest
    layer's nodes, averaged over steps) and ``max_widest``, ``mean_nodes`` (draft nodes per step, root not
    counted), ``plain_share`` (steps with no draft at all: plain decoding steps), ``depths`` / ``nodes`` /
    ``widest`` (per step, for distributions) and ``mean_layer_widths``."""
    depths = [s.tree.max_depth for s in steps]
    nodes = [s.tree.num_drafts for s in steps]
    widest = [s.tree.widest_layer for s in steps]
    n = len(steps)
    return {
        "steps": n,
        "mean_depth": mean_tree_depth(steps),
        "mean_widest": sum(widest) / n if n else 0.0,
        "max_widest": max(widest, default=0),
        "mean_nodes": mean_tree_nodes(steps),
        "plain_share": plain_share(steps) or 0.0,
        "depths": depths,
        "nodes": nodes,
        "widest": widest,
        "mean_layer_widths": mean_layer_widths(steps),
    }


def representative_step(steps: Sequence[StepRecord], around: str = "median") -> int:
    """The index (from 0) of a step that shows the run typically: its tree has the run's median depth
    (the lower median), or with ``around="mean"`` the depth of the run nearest its mean depth (the lower
    on a tie: where two runs' mean depths are compared, their median steps can have one depth);
    among those the last step is avoided (it is often cut short by the end of the run), then the one whose
    accepted drafts are closest to the run's median (the upper one: a run that accepts a draft in half its
    steps does not open on a tree where every draft was rejected), then the one with the most draft nodes,
    then the earliest.  0 for no steps."""
    if not steps:
        return 0
    depths = sorted(s.tree.max_depth for s in steps)
    if around == "mean":
        mean = sum(depths) / len(depths)
        center = min(set(depths), key=lambda d: (abs(d - mean), d))
    else:
        center = depths[(len(depths) - 1) // 2]
    accepted = sorted(s.accepted_tokens for s in steps)[len(steps) // 2]
    candidates = [s for s in steps if s.tree.max_depth == center]
    if len(candidates) > 1:
        candidates = [s for s in candidates if s.index != steps[-1].index]
    best = max(candidates, key=lambda s: (-abs(s.accepted_tokens - accepted), s.tree.num_drafts, -s.index))
    return best.index


CONFIDENCE_EDGES = (0.0, 0.01, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 1.0)
"""Bin edges of a drafter's claimed confidence in a reliability table (the last bin holds 0.95..1)."""
RELIABILITY_DEPTHS = 4
"""Depths 1, 2, 3 get rows of their own in a reliability table; 4 and deeper share one ("4+")."""


def confidence_bin(value: float, edges: Sequence[float] = CONFIDENCE_EDGES) -> int:
    """The bin of ``value`` (0 .. len(edges) - 2; values outside the edges go to the end bins)."""
    for k in range(len(edges) - 2, -1, -1):
        if value >= edges[k]:
            return k
    return 0


def reliability_points(steps: Sequence[StepRecord], kind: str = "draft", confidence=None) -> list[tuple]:
    """``(confidence, outcome, depth)`` per draft node, from the run's own verdicts.

    * ``kind="draft"``: every node the target checked (its parent was accepted); confidence = its draft
      probability given the parent, or ``confidence(step, node)`` when given (e.g. a calibration's value
      for it); outcome = accepted.  What a drafter's probability claims: P(accepted | parent accepted).
    * ``kind="path"``: every draft node; confidence = its path probability (the product of the draft
      probabilities from the root); outcome = the whole path to it was accepted."""
    if kind not in ("draft", "path"):
        raise ValueError(f"kind must be 'draft' or 'path', not {kind!r}")
    points = []
    for s in steps:
        tree, on_path = s.tree, set(s.accepted_path)
        for node in range(1, len(tree)):
            if kind == "path":
                points.append((math.exp(tree.path_logprob[node]), node in on_path, tree.depth[node]))
            elif tree.parent[node] in on_path:
                q = confidence(s, node) if confidence is not None else math.exp(tree.draft_logprob[node])
                points.append((q, node in on_path, tree.depth[node]))
    return points


def reliability_table(points: Sequence[tuple], edges: Sequence[float] = CONFIDENCE_EDGES) -> list[dict]:
    """Per (depth bucket, confidence bin) of ``points`` (``reliability_points``): ``depth`` (1, 2, 3, or
    ``RELIABILITY_DEPTHS`` for 4 and deeper), ``bin``, ``low`` / ``high`` (the bin's edges), ``count``,
    ``hits`` (outcomes true), ``confidence`` (mean claimed) and ``observed`` (hits / count)."""
    groups: dict[tuple[int, int], list] = {}
    for value, outcome, depth in points:
        key = (min(max(depth, 1), RELIABILITY_DEPTHS), confidence_bin(value, edges))
        groups.setdefault(key, []).append((value, bool(outcome)))
    return [
        {
            "depth": d,
            "bin": b,
            "low": edges[b],
            "high": edges[b + 1],
            "count": len(items),
            "hits": sum(o for _, o in items),
            "confidence": sum(v for v, _ in items) / len(items),
            "observed": sum(o for _, o in items) / len(items),
        }
        for (d, b), items in sorted(groups.items())
    ]


def calibration_error(rows: Sequence[dict]) -> float:
    """Expected calibration error of ``reliability_table`` rows: the count-weighted mean of
    |observed - mean confidence| (0 = the confidence means exactly what it says)."""
    total = sum(r["count"] for r in rows)
    return sum(r["count"] * abs(r["observed"] - r["confidence"]) for r in rows) / total if total else 0.0


def spread(values: Sequence[float]) -> dict:
    """``median``, ``low``, ``high`` and ``n`` of repeated measurements (zeros for none)."""
    ordered = sorted(values)
    n = len(ordered)
    if not n:
        return {"median": 0.0, "low": 0.0, "high": 0.0, "n": 0}
    mid = ordered[n // 2] if n % 2 else (ordered[n // 2 - 1] + ordered[n // 2]) / 2
    return {"median": mid, "low": ordered[0], "high": ordered[-1], "n": n}


def percentile(values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0 to 1) of ``values``, the nearest of them by rank (NaN for none)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))] if ordered else float("nan")


SAME_SPEED = 0.03
"""Two methods whose paired time ratios all lie within this share of 1 run at the same speed."""


def paired_verdict(ratios: Sequence[float], tolerance: float = SAME_SPEED) -> str:
    """What repeated, interleaved, paired timings say, from ``ratios`` = time of B / time of A per
    repetition (> 1: A was faster): ``"A"`` when every repetition has A faster by more than
    ``tolerance``, ``"B"`` likewise, ``"same"`` when every ratio is within ``tolerance`` of 1,
    ``"A narrowly"`` when A was faster in every repetition but by no more than ``tolerance`` in some
    (``"B narrowly"`` likewise), else ``"unclear"`` (the repetitions disagree)."""
    if not ratios:
        return "unclear"
    if all(r > 1 + tolerance for r in ratios):
        return "A"
    if all(r < 1 - tolerance for r in ratios):
        return "B"
    if all(abs(r - 1) <= tolerance for r in ratios):
        return "same"
    if all(r > 1 for r in ratios):
        return "A narrowly"
    if all(r < 1 for r in ratios):
        return "B narrowly"
    return "unclear"


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


def mean_sq_miss(steps: Sequence[StepRecord]) -> float | None:
    """Mean over steps of (expected - realised committed tokens)^2: with ``mean_expected`` and
    ``mean_realised`` it gives the spread of the per-step miss, so pooled runs can say how far a
    calibration's mean miss is from sampling noise (``talon.bench.results``; None without expectations)."""
    if mean_expected(steps) is None:
        return None
    return sum((s.expected - s.accepted_tokens - 1) ** 2 for s in steps) / len(steps)


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
    The target also waits for a speculation longer than its verification.  The rest of each step (its
    bookkeeping) is not overlapped, so with no right guess (and drafts shorter than verification) the
    projection is the run's own time.  Built from a sync trace's measured phase times (in an async trace
    a right guess already hid its draft); an upper bound on the saving, since it ignores the extra forward
    for the guessed bonus token."""
    steps = trace.steps
    if not steps:
        return trace.prefill_seconds
    rest = sum(s.step_seconds - s.draft_seconds - s.verify_seconds for s in steps)
    total = trace.prefill_seconds + steps[0].draft_seconds + sum(s.verify_seconds for s in steps) + rest
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
