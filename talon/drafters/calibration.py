"""Calibrated confidence: the probability that a drafted node is accepted given that its parent was, as a
function of what the drafter reports (its draft probability q), the node's depth, its source, and for
prompt lookup the length of the n-gram it matched.

Under greedy verification exactly one child of an accepted node can be accepted (the target's argmax),
and a node is *reached* (checked by the target) exactly when its parent was accepted; so every step
labels its reached nodes accepted or not, and those labels are what a calibration counts.

``Calibration`` keeps counts per cell (source, depth bucket, q bin, match bucket) and answers
``(accepted + s * prior') / (reached + s)``: the prior (a fitted table shipped with a drafter, else
the raw q, or for prompt lookup ``LOOKUP_PRIOR[match length] * q``) is worth ``s`` observations, and a run's own
verdicts pull each cell toward what this run sees.  ``prior'`` is the prior with its odds multiplied by
the run's scale: the ratio ``r`` of the run's acceptances to the summed priors of a source's reached
nodes so far (``(accepted + k) / (prior sum + k)``), turned into the odds multiplier that changes that
sum by ``r``.  A fitted table is an average over prompts, and on a prompt where the drafter is accepted
less (or more) often than on average every cell, seen or not, moves with it long before each cell has
data of its own; on the odds a sure cell never reaches 1.  Torch-free.
"""

from __future__ import annotations

import bisect
import json
import logging
import math
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType

from ..files import write_text_atomically
from ..tree import ACCEPTED, SOURCE_MODEL, SOURCE_RETRIEVAL, DraftTree, Verdict

log = logging.getLogger(__name__)

Q_EDGES = (0.0, 0.02, 0.05, 0.1, 0.2, 0.3, 0.4, 0.5, 0.6, 0.7, 0.8, 0.9, 0.95, 0.99, 1.0)
"""Bin edges of the draft probability q (14 bins; the last holds q in [0.99, 1])."""
MAX_DEPTH_BUCKET = 4
"""Depths 1, 2, 3 have cells of their own; 4 and deeper share one."""
MAX_MATCH_BUCKET = 3
"""Prompt lookup's match lengths 1, 2 and 3+ have cells of their own."""
PRIOR_STRENGTH = 8.0
"""How many observations the prior is worth in a cell."""
SCALE_STRENGTH = MappingProxyType({SOURCE_MODEL: 1.0, SOURCE_RETRIEVAL: 5.0})
"""Per source, how many expected acceptances the run-level scale starts from at 1 (the prior as fitted):
the smaller, the faster a run's own verdicts move it.  Chosen by decoding four prompt sets no headline
runs (the head trainer's held-out pool, MT-Bench 9-32 with HumanEval 8-23, the calibration prompts, the
style prompts) under each setting: a model's drafts learn fastest at 1 (against 4, TALON auto's largest
error per category fell on all four sets, its mean on three and held on the fourth); prompt lookup's
acceptance swings between copies and guesses, and at 2 a code edit that copies then departs was planned
18-21 % high, so it learns at 5 (hybrid auto's mean error over the four sets 2.5 %, against 3.9 % at
4 : 10; docs/benchmarks.md, run 67)."""
PRIOR_BINS = 50
"""The reached nodes' priors are kept in this many equal bins of [0, 1] (count and sum) to fit the scale."""
ODDS_LOG_RANGE = 7.0
"""The run-level odds multiplier stays within ``exp(+-ODDS_LOG_RANGE)``."""
LOOKUP_PRIOR = MappingProxyType({0: 0.32, 1: 0.32, 2: 0.64, 3: 0.83})
"""A retrieval draft without a fitted cell is assumed accepted with probability ``LOOKUP_PRIOR[match
length] * q`` before any verdict (then learned): prompt lookup's q is how often a continuation followed
the n-gram, and a single continuation of a one-token match is still a guess.  Least-squares fit
(``fit_match_prior``) to prompt lookup's drafts on the embedded target's held-out answers (docs/head.md)."""
CALIBRATION_FILE = "calibration.json"
"""A head's fitted table of its own drafts (source ``model``), in the head's directory."""
LOOKUP_CALIBRATION_FILE = "calibration-lookup.json"
"""A head's fitted table of prompt lookup's drafts when merged with it (source ``retrieval``)."""

Cell = tuple[str, int, int, int]
"""``(source, depth bucket, q bin, match bucket)``."""


def q_bin(q: float) -> int:
    """The bin of ``q`` (0 .. len(Q_EDGES) - 2)."""
    return min(max(bisect.bisect_right(Q_EDGES, q) - 1, 0), len(Q_EDGES) - 2)


def cell(q: float, depth: int, source: str, match: int = 0) -> Cell:
    """The calibration cell of a node with draft probability ``q`` at ``depth`` (1 = the root's children)."""
    bucket = min(max(match, 0), MAX_MATCH_BUCKET) if source == SOURCE_RETRIEVAL else 0
    return source, min(max(depth, 1), MAX_DEPTH_BUCKET), q_bin(q), bucket


@dataclass
class Counts:
    reached: float = 0.0
    accepted: float = 0.0


def reached_nodes(tree: DraftTree, verdict: Verdict) -> Iterable[tuple[int, bool]]:
    """``(node, accepted)`` for every draft node the target checked (its parent was accepted)."""
    on_path = set(verdict.accepted_path)
    for node in range(1, len(tree)):
        if tree.parent[node] in on_path:
            yield node, verdict.status[node] == ACCEPTED


class Calibration:
    """Calibrated acceptance per cell, from a prior and a run's verdicts (per-run state).

    Args:
        prior: fitted acceptance per cell (``fit`` / ``load``), e.g. the shipped head's; cells it lacks
            use the raw q (model drafts) or ``LOOKUP_PRIOR[match] * q`` (retrieval drafts).
        strength: what the prior is worth, in observations.
    """

    def __init__(self, prior: dict[Cell, float] | None = None, strength: float = PRIOR_STRENGTH) -> None:
        self.prior = dict(prior or {})
        self.strength = strength
        self.counts: dict[Cell, Counts] = {}
        self.totals: dict[str, Counts] = {}  # per source: the priors of reached nodes (as ``reached``), accepted
        self._priors: dict[str, list[list[float]]] = {}  # per source, per PRIOR_BINS bin: [count, sum of priors]
        self._odds: dict[str, float] = {}  # per source: the odds multiplier ``scale`` gives

    def prior_of(self, key: Cell, q: float) -> float:
        """The cell's prior as given (fitted table, raw q or the lookup prior), before the run's scale."""
        if key in self.prior:
            return self.prior[key]
        return LOOKUP_PRIOR[key[3]] * q if key[0] == SOURCE_RETRIEVAL else q

    def ratio(self, source: str) -> float:
        """The run's acceptance of ``source``'s drafts relative to the prior so far (1 before any):
        accepted over the sum of the reached nodes' priors, each with the source's ``SCALE_STRENGTH`` added."""
        t = self.totals.get(source)
        if t is None:
            return 1.0
        strength = SCALE_STRENGTH[source]
        return (t.accepted + strength) / (t.reached + strength)

    def scale(self, source: str) -> float:
        """The odds multiplier applied to ``source``'s priors (``scale_odds``): the one that, applied to
        the priors of the nodes reached so far, raises their sum by ``ratio`` (1 before any)."""
        return self._odds.get(source, 1.0)

    def _refit_scale(self, source: str) -> None:
        bins = [(n, total / n) for n, total in self._priors[source] if n]
        want = self.ratio(source) * sum(n * p for n, p in bins)
        self._odds[source] = math.exp(log_odds_shift(bins, want))

    def __call__(self, q: float, depth: int, source: str, match: int = 0) -> float:
        """P(accepted | parent accepted) for a node the drafter gave probability ``q``."""
        key = cell(q, depth, source, match)
        prior = scale_odds(self.prior_of(key, q), self.scale(source))
        c = self.counts.get(key)
        if c is None:
            return prior
        return (c.accepted + self.strength * prior) / (c.reached + self.strength)

    def node(self, tree: DraftTree, node: int) -> float:
        """The calibrated acceptance of ``tree``'s ``node`` given its parent's."""
        return self(_q(tree, node), tree.depth[node], tree.source[node], tree.match[node])

    def given_parents(self, tree: DraftTree) -> list[float]:
        """Per node, its calibrated acceptance given its parent's (1 at the root), each parent's
        children taken in node order (best first, as builders add them) and held by ``exclusive``."""
        out = [1.0] * len(tree)
        siblings = [0.0] * len(tree)
        for node in range(1, len(tree)):
            parent = tree.parent[node]
            out[node] = exclusive(self.node(tree, node), siblings[parent])
            siblings[parent] += out[node]
        return out

    def path_acceptance(self, tree: DraftTree) -> list[float]:
        """Per node, the calibrated probability that the whole path to it is accepted (1 at the root)."""
        given = self.given_parents(tree)
        out = [1.0] * len(tree)
        for node in range(1, len(tree)):
            out[node] = out[tree.parent[node]] * given[node]
        return out

    def expected_tokens(self, tree: DraftTree) -> float:
        """Expected committed tokens of verifying ``tree``: 1 (the bonus) + sum of path acceptances."""
        return sum(self.path_acceptance(tree))

    def observe(self, tree: DraftTree, verdict: Verdict) -> None:
        """Count the step's reached nodes (online learning from the run's own verdicts) and refit the
        run-level scale of each source seen."""
        seen: set[str] = set()
        for node, accepted in reached_nodes(tree, verdict):
            q = _q(tree, node)
            key = cell(q, tree.depth[node], tree.source[node], tree.match[node])
            c = self.counts.setdefault(key, Counts())
            c.reached += 1.0
            c.accepted += float(accepted)
            t = self.totals.setdefault(key[0], Counts())
            prior = self.prior_of(key, q)
            t.reached += prior
            t.accepted += float(accepted)
            b = self._priors.setdefault(key[0], [[0, 0.0] for _ in range(PRIOR_BINS)])[
                min(int(prior * PRIOR_BINS), PRIOR_BINS - 1)
            ]
            b[0] += 1
            b[1] += prior
            seen.add(key[0])
        for source in seen:
            self._refit_scale(source)


def exclusive(given_parent: float, siblings: float) -> float:
    """A node's acceptance given its parent's, held to what its earlier siblings left: under
    verification at most one child of a node is accepted (the target's token is one of them at most),
    so a parent's children sum to at most 1.  A cell's value is an average over contexts in which a
    node's siblings were more or less likely; two siblings of q = 0.45 each take the 0.4-0.5 bin's 0.51
    for the shipped head, 1.02 together.  ``siblings``: the acceptances (given the parent) already
    given to the parent's earlier children."""
    return min(given_parent, max(0.0, 1.0 - siblings))


def log_odds_shift(bins: Sequence[tuple[float, float]], want: float, tolerance: float = 1e-12) -> float:
    """The ``x`` in ``[-ODDS_LOG_RANGE, ODDS_LOG_RANGE]`` where ``sum n * scale_odds(p, exp(x))`` over
    ``bins`` (count, prior) equals ``want`` (the nearest end where it cannot).  The sum rises with
    ``x``, with slope ``sum n * q * (1 - q)`` at the scaled priors ``q``: Newton's steps, bisection
    wherever a step would leave the bracket the signs so far allow.  A handful of passes over the bins,
    where bisection to the same precision takes about forty: every step of a run refits."""
    lo, hi, x = -ODDS_LOG_RANGE, ODDS_LOG_RANGE, 0.0
    for _ in range(100):
        s = math.exp(x)
        total = slope = 0.0
        for n, p in bins:
            q = scale_odds(p, s)
            total += n * q
            slope += n * q * (1.0 - q)
        gap = total - want
        if abs(gap) <= tolerance * max(abs(want), 1.0):
            return x
        if gap < 0:
            lo = x
        else:
            hi = x
        if hi - lo <= tolerance:
            break
        newton = x - gap / slope if slope > 0 else math.nan
        x = newton if lo < newton < hi else (lo + hi) / 2
    return x


def scale_odds(p: float, s: float) -> float:
    """``p`` with its odds multiplied by ``s``: about ``p * s`` for small ``p``, but it stays below 1.  A
    run whose drafts are accepted 30 % more often than the table says raises a 0.9 cell to 0.92, not to
    1 (clamped), which would make every deeper node of a copy chain look certain to be accepted."""
    if p <= 0.0 or p >= 1.0:
        return min(max(p, 0.0), 1.0)
    return s * p / (1.0 - p + s * p)


def _q(tree: DraftTree, node: int) -> float:
    return math.exp(tree.draft_logprob[node])


# ---- fitting, reliability, files -----------------------------------------------------------------------
@dataclass(frozen=True)
class Observation:
    """One reached node: its draft probability, depth, source, match length and whether it was accepted."""

    q: float
    depth: int
    source: str
    match: int
    accepted: bool


def observations(steps: Iterable[tuple[DraftTree, Verdict]]) -> list[Observation]:
    """Every reached node of the given (tree, verdict) pairs (a run's steps)."""
    return [
        Observation(_q(tree, n), tree.depth[n], tree.source[n], tree.match[n], ok)
        for tree, verdict in steps
        for n, ok in reached_nodes(tree, verdict)
    ]


def fit(obs: Sequence[Observation], min_count: int = 20) -> dict[Cell, float]:
    """Observed acceptance per cell with at least ``min_count`` observations, made monotone in q within
    each (source, depth, match) row (pool-adjacent-violators, weighted by counts): a fitted table."""
    groups: dict[Cell, Counts] = {}
    for o in obs:
        c = groups.setdefault(cell(o.q, o.depth, o.source, o.match), Counts())
        c.reached += 1
        c.accepted += o.accepted
    rows: dict[tuple[str, int, int], list[tuple[int, float, float]]] = {}
    for (src, d, b, m), c in groups.items():
        if c.reached >= min_count:
            rows.setdefault((src, d, m), []).append((b, c.accepted / c.reached, c.reached))
    table = {}
    for (src, d, m), cells in rows.items():
        for b, value in _isotonic(sorted(cells)):
            table[(src, d, b, m)] = value
    return table


def fit_match_prior(obs: Sequence[Observation]) -> dict[int, float]:
    """Per match bucket of the retrieval observations, the least-squares ``c`` of acceptance ~ ``c * q``
    (the form of ``LOOKUP_PRIOR``)."""
    sums: dict[int, list[float]] = {}
    for o in obs:
        if o.source == SOURCE_RETRIEVAL:
            s = sums.setdefault(cell(o.q, o.depth, o.source, o.match)[3], [0.0, 0.0])
            s[0] += o.accepted * o.q
            s[1] += o.q * o.q
    return {m: s[0] / s[1] for m, s in sorted(sums.items()) if s[1] > 0}


def _isotonic(cells: list[tuple[int, float, float]]) -> list[tuple[int, float]]:
    """Non-decreasing weighted fit of ``(bin, value, weight)`` sorted by bin."""
    blocks: list[list] = []  # [value, weight, bins]
    for b, v, w in cells:
        blocks.append([v, w, [b]])
        while len(blocks) > 1 and blocks[-2][0] > blocks[-1][0]:
            v2, w2, b2 = blocks.pop()
            v1, w1, b1 = blocks.pop()
            blocks.append([(v1 * w1 + v2 * w2) / (w1 + w2), w1 + w2, b1 + b2])
    return [(b, v) for v, _, bins in blocks for b in bins]


def reliability(obs: Sequence[Observation], confidence=None) -> list[dict]:
    """Per (depth bucket, q bin): mean confidence, observed acceptance and count.  ``confidence(o)`` is
    what the drafter claims for an observation (default its raw q; pass a calibration to score it)."""
    confidence = confidence or (lambda o: o.q)
    groups: dict[tuple[int, int], list] = {}
    for o in obs:
        groups.setdefault((min(o.depth, MAX_DEPTH_BUCKET), q_bin(o.q)), []).append((confidence(o), o.accepted))
    return [
        {
            "depth": d,
            "bin": b,
            "confidence": sum(c for c, _ in items) / len(items),
            "accepted": sum(a for _, a in items) / len(items),
            "count": len(items),
        }
        for (d, b), items in sorted(groups.items())
    ]


def expected_calibration_error(rows: Sequence[dict]) -> float:
    """Count-weighted mean of |observed acceptance - mean confidence| over ``reliability`` rows."""
    total = sum(r["count"] for r in rows)
    return sum(r["count"] * abs(r["accepted"] - r["confidence"]) for r in rows) / total if total else 0.0


def table_rows(table: dict[Cell, float]) -> list[dict]:
    """A fitted table as JSON-ready rows (``{"source", "depth", "bin", "match", "accepted"}``), in cell order."""
    return [{"source": s, "depth": d, "bin": b, "match": m, "accepted": v} for (s, d, b, m), v in sorted(table.items())]


def rows_table(rows: Iterable[dict]) -> dict[Cell, float]:
    """The table ``table_rows`` wrote (``KeyError`` / ``TypeError`` / ``ValueError`` for rows that are not)."""
    return {(r["source"], int(r["depth"]), int(r["bin"]), int(r["match"])): float(r["accepted"]) for r in rows}


def save(table: dict[Cell, float], path: Path, meta: dict | None = None) -> None:
    write_text_atomically(
        path, json.dumps({"q_edges": list(Q_EDGES), "cells": table_rows(table), **(meta or {})}, indent=1)
    )


def load(path: Path) -> dict[Cell, float] | None:
    """A fitted table written by ``save`` (None when the file is missing or unreadable, or was written
    with other bins)."""
    try:
        data = json.loads(Path(path).read_text())
        if tuple(data["q_edges"]) != Q_EDGES:
            return None
        return rows_table(data["cells"])
    except FileNotFoundError:
        return None
    except (OSError, ValueError, KeyError, TypeError) as err:  # there, but not a table: say so, plan without it
        log.warning("Calibration table %s is unreadable (%s); the drafter plans with its raw confidence.", path, err)
        return None


def load_drafter_tables(directory: Path) -> dict[Cell, float] | None:
    """A head directory's fitted tables, merged: its own drafts' (``CALIBRATION_FILE``) and, over them,
    the retrieval cells of prompt lookup's merged with it (``LOOKUP_CALIBRATION_FILE``); None when
    neither is there."""
    own = load(Path(directory) / CALIBRATION_FILE)
    lookup = load(Path(directory) / LOOKUP_CALIBRATION_FILE)
    if own is None and lookup is None:
        return None
    merged = dict(own or {})
    merged.update({k: v for k, v in (lookup or {}).items() if k[0] == SOURCE_RETRIEVAL})
    return merged
