"""The cost rule: how many of a tree policy's candidates to keep, from the device's cost curve and the
drafter's calibrated confidence (``docs/decisions.md``, "Trees that grow while they pay").

A tree's expected committed tokens are ``E = 1 + sum over draft nodes of P(path to the node accepted)``
(siblings exclude each other under greedy verification: the target's token is one of them at most),
with ``P`` the product of calibrated acceptances along the path; its price is the cost curve's
``price(nodes, call widths)`` in plain steps.  The policy (TALON's Top-K root and mu gate, EAGLE-2's
top-k expansion and re-rank) proposes candidates best first; the rule keeps the prefix of them with
the most ``E / price``, drafts another layer while an optimistic estimate of that layer's gain beats its price,
and a step whose best tree does not beat a plain step (``1 / price(root only)``) is a plain step.

One ``CostRule`` per run: it holds the run's calibration (learned online from the verdicts).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..drafters.calibration import Calibration, exclusive
from ..runtime.cost_curve import CostCurve
from ..tree import DraftTree, Verdict


@dataclass
class Candidate:
    """A child the policy would add: under ``parent``, ``token`` with draft log-probability
    ``logprob``, its ``source`` and (retrieval) ``match`` length; ``accept`` is the calibrated probability
    that the path to it is accepted, ``given_parent`` that it is accepted given its parent was."""

    parent: int
    token: int
    logprob: float
    source: str
    match: int
    accept: float = 0.0
    given_parent: float = 0.0


class CostRule:
    """The run's calibration and cost curve, and the sizing decisions built on them.

    Args:
        calibration: the drafter's calibrated confidence (per run, learned online).
        curve: the device's cost curve, or None (no prices: the rule can only report ``expected``).
        sizing: whether builders size trees by the rule (``TreeConfig.auto``); otherwise it only prices
            and values the trees they grow.
    """

    def __init__(
        self, calibration: Calibration | None = None, curve: CostCurve | None = None, sizing: bool = False
    ) -> None:
        if sizing and curve is None:
            raise ValueError("sizing trees by cost needs a cost curve")
        self.calibration = calibration or Calibration()
        self.curve = curve
        self.sizing = sizing

    # ---- values and prices ---------------------------------------------------------------------------
    def value(self, tree: DraftTree, candidate: Candidate, path_accept: Sequence[float], siblings: float) -> None:
        """Fill in ``candidate``'s ``given_parent`` and ``accept`` (P(path accepted)) from the parents'
        ``path_accept`` and ``siblings``, the acceptance (given the parent) already given to the parent's
        earlier children (``talon.drafters.calibration.exclusive``)."""
        depth = tree.depth[candidate.parent] + 1
        q = math.exp(candidate.logprob)
        given = self.calibration(q, depth, candidate.source, candidate.match)
        candidate.given_parent = exclusive(given, siblings)
        candidate.accept = path_accept[candidate.parent] * candidate.given_parent

    def price(self, nodes: int, call_widths: Sequence[int]) -> float | None:
        """The step's price in plain steps (None without a curve)."""
        return None if self.curve is None else self.curve.price(nodes, call_widths)

    # ---- decisions -------------------------------------------------------------------------------------
    def affordable(self, expected: float, nodes: int, call_widths: Sequence[int], accepts: Sequence[float]) -> int:
        """How many of the candidates whose acceptance probabilities are ``accepts`` (best first) to add to a
        tree of ``nodes`` nodes (the root included) worth ``expected`` tokens: the prefix with the most
        E / price (the shortest of equals; 0 when none beats the tree as it is).  A prefix, not a stop at
        the first candidate that alone does not pay, because the curve need not rise with every node: where
        a second row costs more than a third (a CPU kernel's blocking), two unlikely candidates can pay
        together where one does not."""
        best, best_k = expected / self.curve.price(nodes, call_widths), 0
        for k, accept in enumerate(accepts, start=1):
            expected += accept
            ratio = expected / self.curve.price(nodes + k, call_widths)
            if ratio > best:
                best, best_k = ratio, k
        return best_k

    def layer_pays(
        self,
        expected: float,
        nodes: int,
        call_widths: Sequence[int],
        frontier_accept: Sequence[float],
        frontier_given_parent: Sequence[float],
    ) -> bool:
        """Whether drafting one more layer below a frontier may pay.  Per frontier node,
        ``frontier_accept`` is the calibrated probability that its path is accepted and
        ``frontier_given_parent`` that it is accepted given its parent was.  The estimate assumes
        confidence persists along a path: a node's best child is accepted (given the node was) as
        likely as the node itself was given its parent, so a sure chain is extended and an unsure one is
        not, judged afresh at every step.  The call covers the whole frontier; does some number of the
        likeliest children (one node each) raise E / price?"""
        if not frontier_accept:
            return False
        widths = [*call_widths, len(frontier_accept)]
        ratio = expected / self.curve.price(nodes, call_widths)
        gains = sorted((a * g for a, g in zip(frontier_accept, frontier_given_parent)), reverse=True)
        for k, gain in enumerate(gains, start=1):
            expected += gain
            if expected / self.curve.price(nodes + k, widths) > ratio:
                return True
        return False

    # ---- learning ----------------------------------------------------------------------------------------
    def observe(self, tree: DraftTree, verdict: Verdict) -> None:
        """The step's verdict, for the calibration."""
        self.calibration.observe(tree, verdict)
