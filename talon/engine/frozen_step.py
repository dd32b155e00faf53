"""The tree lab: one decoding step frozen, so its tree can be rebuilt and verified with other settings.

The context of step k is the prompt plus every token committed before step k.  ``FrozenStep`` holds the
target and each drafter at that context once; every ``explore`` then drafts the step's tree with the
given method and settings (each build hands the drafter the same context, so it crops back to it),
verifies it with one target forward and throws the tree's rows away again.  It is the decoding loop's
own step.  Made from the run replayed up to the step (``talon.engine.decode.Replay``) it holds the run's
own caches, drafter state and calibration, so at the run's settings it rebuilds the run's tree; made
from the context prefilled in one piece, it is the step a decode started at that context would take
first: the same tokens, and trees whose close candidates can come in another order (other last bits).

At temperature > 0 the target's choice at each position comes from the run's position-keyed noise
(``talon.engine.sampling``), so the lab shows the sample the run itself would draw there; ``reroll``
repeats the verification of one tree with fresh seeds to show the distribution instead.

Everything the lab shows comes from here (the UI does no tensor maths): a rebuilt tree is a
``StepRecord`` like a run's steps, with TALON's gate record attached.
"""

from __future__ import annotations

import itertools
import math
import random
import threading
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import torch

from ..config import AUTO_CAP, AUTO_METHODS, GATE_METHODS, ConfigError, TreeConfig
from ..drafters.base import Drafter
from ..drafters.calibration import Calibration
from ..drafters.factory import drafter_for
from ..models.loaded import LoadedModel
from ..models.registry import ModelRegistry
from ..runtime.cost_curve import CostCurve
from ..trace import RunTrace, StepRecord
from .builders import make_builder
from .cost_measure import cost_curve_for
from .decode import Replayed, fill_token_texts
from .sampling import PositionNoise, gumbel
from .sizing import CostRule
from .stopping import cut_step
from .verify import Verifier, sampling_accept

LAB_METHODS = ("talon", "eagle2", "static", "chain")
"""The tree methods shown side by side at a frozen step (same N; the chain at its length gamma)."""


def sweep_row(step: StepRecord, field: str, value) -> dict:
    """One row of a sweep: the setting's value and what the step's tree did (``FrozenStep.sweep``)."""
    return {
        field: value,
        "accepted": step.accepted_tokens,
        "committed": len(step.committed_ids),
        "depth": step.tree.max_depth,
        "widest": step.tree.widest_layer,
        "drafter_calls": step.drafter_forwards,
        "nodes": step.tree.num_drafts,
        "size": len(step.tree),
        "call_widths": list(step.call_widths),
        "expected": step.expected,
        "price": step.price,
        "stop": step.stop,
    }


def step_context(trace: RunTrace, index: int) -> list[int]:
    """The committed tokens before step ``index`` of ``trace`` (prompt included; the last is the root)."""
    if not 0 <= index < len(trace.steps):
        raise ConfigError(f"Step {index + 1} is not a step of this run (it has {len(trace.steps)}).")
    return list(trace.prompt_ids) + [t for s in trace.steps[:index] for t in s.committed_ids]


def step_depth_limit(trace: RunTrace, index: int) -> int | None:
    """The deepest draft layer (from 1) the run allowed at step ``index`` (from 0): the new tokens it had
    left, less the bonus token (0: the step could only be plain); None for a trace that does not say its
    max new tokens."""
    limit = trace.decode_config.get("max_new_tokens")
    if limit is None:
        return None
    return int(limit) - sum(len(s.committed_ids) for s in trace.steps[:index]) - 1


@dataclass
class Reroll:
    """A tree verified many times with fresh random draws.

    Attributes:
        temperature: the sampling temperature of the draws.
        counts: how often each token came first (the first token each roll emitted).
        target: the target's distribution of that first token, ``[vocab]`` (same temperature).
        after: per node of the tree's accepted path, the target's distribution after it ``[vocab]``.
    """

    temperature: float
    counts: Counter
    target: list[float]
    after: dict[int, list[float]]

    @property
    def rolls(self) -> int:
        return sum(self.counts.values())

    @property
    def total_variation(self) -> float:
        """Between the first tokens' frequencies and ``target`` (0 with no rolls)."""
        n = self.rolls
        if not n:
            return 0.0
        return 0.5 * sum(abs(self.counts.get(t, 0) / n - p) for t, p in enumerate(self.target))

    @property
    def noise_total_variation(self) -> float:
        """The total variation that sampling noise alone gives, on average, between ``rolls`` exact draws
        from ``target`` and ``target``: half the sum over tokens of E|count / rolls - p|, each the exact
        mean absolute deviation of a binomial (``binomial_mean_deviation``).  A peaked distribution gives
        little, a flat one more; a long tail of unlikely tokens adds about 2p a token (most are never
        drawn), so over a whole vocabulary it stays below the total variation's bound of 1."""
        n = self.rolls
        if not n:
            return 0.0
        return 0.5 * sum(binomial_mean_deviation(n, p) for p in self.target if 0.0 < p < 1.0) / n

    def noise_bound(self, quantile: float = 0.99, simulations: int = 400, seed: int = 0) -> float:
        """The total variation that ``quantile`` of exact samplers stay under: ``simulations`` sets of
        ``rolls`` draws from ``target`` itself (seeded), each set's total variation from ``target``, and
        that quantile of them.  A re-roll above it is further from the target than chance explains."""
        n = self.rolls
        if not n:
            return 0.0
        rng = random.Random(seed)
        tokens = range(len(self.target))
        cumulative = list(itertools.accumulate(self.target))
        spread = []
        for _ in range(simulations):
            counts = Counter(rng.choices(tokens, cum_weights=cumulative, k=n))
            drawn = sum(abs(c / n - self.target[t]) for t, c in counts.items())
            missed = cumulative[-1] - sum(self.target[t] for t in counts)  # never drawn: |0 - p| = p
            spread.append(0.5 * (drawn + missed))
        spread.sort()
        return spread[min(len(spread) - 1, int(quantile * len(spread)))]


def binomial_mean_deviation(n: int, p: float) -> float:
    """E|X - n p| for X ~ Binomial(n, p), exactly (De Moivre): 2 (m + 1) C(n, m + 1) p^(m+1) (1 - p)^(n-m)
    with m = floor(n p), in logarithms so that n in the hundreds and p near 0 stay finite.  At m = 0 (a
    token unlikely to be drawn at all) it is 2 n p (1 - p)^n."""
    if not 0.0 < p < 1.0:
        return 0.0
    m = math.floor(n * p)
    if m >= n:
        return 0.0
    log_term = (
        math.log(2 * (m + 1))
        + math.lgamma(n + 1)
        - math.lgamma(m + 2)
        - math.lgamma(n - m)
        + (m + 1) * math.log(p)
        + (n - m) * math.log1p(-p)
    )
    return math.exp(log_term)


class FrozenStep:
    """A step's context with the target and drafters prefilled once (per-user state: it holds KV caches).

    Args:
        target: the target model.
        registry: where drafter models and heads come from.
        drafter_spec: the drafter of the tree methods (``hybrid`` merges it with prompt lookup).
        context: the committed tokens up to and including the step's root (``step_context``).
        temperature / seed: the run's; at temperature > 0 verification uses the run's noise.
        hybrid_weight: the hybrid drafter's retrieval weight at that step (the run's ``drafter_info``);
            None starts it afresh (0.5), as a decode started at the context would.
        cost_curve: the run's cost curve (prices, and auto-sized trees); measured on first need if None.
        history: the run's steps before this one, whose verdicts the calibration had learned from by
            then (so the lab prices and sizes trees with the run's own calibration at that step).
        replayed: the run's own state at this step (``talon.engine.decode.replay``): its target caches,
            its drafter (for the run's method: ``hybrid``'s merged one, else the tree methods') and its
            calibration, used instead of prefilling ``context`` (and ``history`` is not needed).
        depth_limit: the deepest draft layer (from 1) a tree at this step may grow, as the run's loop
            allowed it (``step_depth_limit``: the new tokens the run had left, less the bonus; 0 makes
            every tree the root alone, a plain step); None for no limit.
    """

    def __init__(
        self,
        target: LoadedModel,
        registry: ModelRegistry,
        drafter_spec: str,
        context: Sequence[int],
        temperature: float = 0.0,
        seed: int = 0,
        hybrid_weight: float | None = None,
        cost_curve: CostCurve | None = None,
        history: Sequence[StepRecord] = (),
        replayed: Replayed | None = None,
        depth_limit: int | None = None,
    ) -> None:
        if len(context) < 2:
            raise ConfigError("The frozen context needs at least two tokens.")
        self.target, self.registry, self.drafter_spec = target, registry, drafter_spec
        self.context = list(context)
        self.temperature, self.seed, self.hybrid_weight = temperature, seed, hybrid_weight
        self.depth_limit = depth_limit
        self.noise = PositionNoise(seed, target.vocab_size, target.device)
        self._lock = threading.Lock()  # one tree at a time in the shared caches (a user's events may overlap)
        self.curve = cost_curve
        self._drafters: dict[str, Drafter] = {}
        if replayed is not None:
            self.verifier, self.calibration = replayed.verifier, replayed.calibration
            self._drafters["hybrid" if replayed.method == "hybrid" else "tree"] = replayed.drafter
        if "tree" not in self._drafters:  # the tree methods' drafter, started at the context
            tree = self._drafters["tree"] = drafter_for("talon", drafter_spec, target, registry)
            with torch.inference_mode():
                if replayed is None:
                    self.calibration = Calibration(tree.calibration_prior)
                    for step in history:
                        self.calibration.observe(step.tree, step)
                    self.verifier = Verifier(target, tree.feature_layers)
                    self.verifier.prefill(self.context)
                tree.start(self.context, self.verifier.features)

    @classmethod
    def of_run(
        cls,
        target: LoadedModel,
        registry: ModelRegistry,
        drafter_spec: str,
        trace: RunTrace,
        index: int,
        replayed: Replayed | None = None,
    ) -> FrozenStep:
        """Step ``index`` (from 0) of ``trace`` frozen with the run's temperature, seed and hybrid weight: from
        ``replayed``, the run's own state there (``talon.engine.decode.Replay``: its trees at the run's
        settings are the run's), else from its context prefilled in one piece (the same tokens, trees that
        can differ from the run's in close candidates; at step 0 the run's own).  Its trees are drafted no
        deeper than the run's were at that step (``step_depth_limit``: at a run's last steps, the tokens
        it had left).  A hybrid run's drafter is made and prefilled here, with the rest of the step's
        model work (``drafter_name`` then only reads it)."""
        context = step_context(trace, index)
        frozen = cls(
            target,
            registry,
            drafter_spec,
            context,
            float(trace.decode_config.get("temperature", 0.0)),
            int(trace.decode_config.get("seed", 0)),
            trace.steps[index].drafter_info.get("retrieval_weight"),
            CostCurve.from_dict(trace.cost_curve) if trace.cost_curve else None,
            trace.steps[:index],
            replayed,
            step_depth_limit(trace, index),
        )
        if trace.tree_config.get("method") == "hybrid":
            frozen.drafter_name("hybrid")
        return frozen

    def rule(self, cfg: TreeConfig, curve: CostCurve | None = None) -> CostRule:
        """The cost rule a tree of ``cfg`` is valued, priced and (auto) sized by at this step: with ``curve``
        when given (e.g. another device's, for a projection), else this device's; an auto tree without a
        curve yet measures this device's first (with a drafter of its own; cached)."""
        if curve is not None:
            return CostRule(self.calibration, curve.for_method(cfg.method), sizing=cfg.auto)
        if cfg.auto and self.curve is None:
            self.measure_curve(cfg.method)
        own = self.curve.for_method(cfg.method) if self.curve is not None else None
        return CostRule(self.calibration, own, sizing=cfg.auto)

    def measure_curve(self, method: str = "talon", progress=None, refresh: bool = False) -> CostCurve:
        """This device's cost curve for the run's drafter (cached, else measured now: 20-40 s on a
        2-core CPU; ``progress(line)`` hears how it goes), kept for the step's later trees; ``refresh`` measures it
        again (and replaces the cached one)."""
        if self.curve is None or refresh:
            fresh = drafter_for(method if method != "chain" else "talon", self.drafter_spec, self.target, self.registry)
            self.curve = cost_curve_for(self.target, fresh, refresh=refresh, progress=progress)
        return self.curve

    @property
    def plain_only(self) -> bool:
        """Whether every tree at this step is the root alone (the run had one new token left here)."""
        return self.depth_limit is not None and self.depth_limit < 1

    @property
    def root(self) -> int:
        return self.context[-1]

    def _drafter(self, method: str) -> Drafter:
        """The prefilled drafter of ``method``: the run's drafter, or it merged with prompt lookup for
        ``hybrid`` (made on first use, holding the run's retrieval weight)."""
        if method != "hybrid":
            return self._drafters["tree"]
        if "hybrid" not in self._drafters:
            drafter = drafter_for(
                "hybrid", self.drafter_spec, self.target, self.registry, hybrid_weight=self.hybrid_weight
            )
            with torch.inference_mode():
                drafter.start(self.context, self.verifier.features)
            self._drafters["hybrid"] = drafter
        return self._drafters["hybrid"]

    def drafter_name(self, method: str) -> str:
        """The name of the drafter that grows ``method``'s trees here (as a trace names its drafter)."""
        with self._lock:  # a hybrid's is made on first use, in the shared caches
            return self._drafter(method).name

    def explore(self, cfg: TreeConfig, index: int = 0, curve: CostCurve | None = None) -> StepRecord:
        """Build ``cfg``'s tree at this step and verify it (the step's caches are left as they were), no
        deeper than the step's ``depth_limit``.  Returns it as step ``index`` of a run (texts filled; TALON's
        gate record in ``gate``); its price and, for an auto tree, its size come from ``curve`` when given
        (``rule``)."""
        if cfg.method == "ar":
            raise ConfigError("Autoregressive decoding has no tree to explore: pick a tree method.")
        builder = make_builder(cfg)
        with self._lock, torch.inference_mode():
            drafter = self._drafter(cfg.method)
            t0 = time.perf_counter()
            built = builder.build(
                drafter,
                self.context,
                self.verifier.features,
                record_gate=cfg.method in GATE_METHODS,
                rule=self.rule(cfg, curve),
                max_depth=self.depth_limit,
            )
            t1 = time.perf_counter()
            verdict = self.verifier.verify(built.tree, self.temperature, self.noise)
            t2 = time.perf_counter()
            self.verifier.drop_tree()
        # What the run's loop would commit: cut at an end-of-sequence token and at the tokens left (the
        # deepest layer plus the bonus); without a limit, a step's path and bonus never exceed its nodes.
        room = self.depth_limit + 1 if self.depth_limit is not None else len(built.tree)
        committed, _ = cut_step(
            built.tree.path_tokens(verdict.accepted_path[-1]) + [verdict.bonus_token], self.target.eos_token_ids, room
        )
        step = StepRecord(
            **vars(verdict),
            index=index,
            tree=built.tree,
            committed_ids=committed,
            draft_start=0.0,
            draft_seconds=t1 - t0,
            verify_start=t1 - t0,
            verify_seconds=t2 - t1,
            drafter_forwards=built.drafter_forwards,
            call_widths=built.call_widths,
            stop=built.stop,
            expected=built.expected,
            price=built.price,
            gate=built.gate,
        )
        tokenizer = self.target.tokenizer
        fill_token_texts([step], tokenizer)
        step.committed_text = tokenizer.decode(committed, skip_special_tokens=True)
        return step

    def every_method(self, cfg: TreeConfig) -> dict[str, StepRecord | str]:
        """The same step with each of ``LAB_METHODS`` at ``cfg``'s settings (same N): its step, or why
        that method cannot build a tree at those settings (EAGLE-2 at K=0, a static tree whose N does not
        fit its depth)."""
        out: dict[str, StepRecord | str] = {}
        for method in LAB_METHODS:
            try:
                out[method] = self.explore(replace(cfg, method=method))
            except ConfigError as err:
                out[method] = str(err)
        return out

    def sweep(
        self,
        cfg: TreeConfig,
        field: str,
        values: Sequence,
        curve: CostCurve | None = None,
        run: Callable[..., StepRecord] | None = None,
    ) -> list[dict]:
        """``explore`` with ``field`` (``budget``, ``mu`` or ``topk``) set to each of ``values``: per value the
        accepted drafts, depth reached, widest layer, drafter calls and draft nodes, and what a price needs:
        ``committed`` (the tokens the run would commit: accepted + bonus, cut at an end-of-sequence token),
        ``expected`` (by the calibrated confidence), ``price`` (in plain steps, by ``curve`` or this device's
        curve; None without one), ``size`` (nodes, root included), ``call_widths`` and ``stop``.  ``run(fn,
        *args, **kwargs)`` calls each ``explore`` (a server: one queued job a tree); None calls it here."""
        run = run or (lambda fn, *args, **kwargs: fn(*args, **kwargs))
        return [sweep_row(run(self.explore, replace(cfg, **{field: v}), curve=curve), field, v) for v in values]

    def pick(self, cfg: TreeConfig, curve: CostCurve | None = None, cap: int = AUTO_CAP) -> StepRecord:
        """The tree the cost rule would grow at this step for ``cfg``'s method and shape settings (N =
        auto, at most ``cap`` nodes), sized by ``curve`` or this device's curve (measured if needed)."""
        if cfg.method not in AUTO_METHODS:
            raise ConfigError(f"The cost rule sizes {', '.join(AUTO_METHODS)} trees, not {cfg.method}.")
        return self.explore(replace(cfg, auto=True, budget=cap), curve=curve)

    @property
    def sampling_temperature(self) -> float:
        """The run's temperature, or 1 for a greedy run (the re-rolls sample)."""
        return self.temperature or 1.0

    def reroll(self, step: StepRecord, rolls: int, seed: int = 0) -> Reroll:
        """Verify ``step.tree`` ``rolls`` times with fresh noise (at ``sampling_temperature``) and count
        the first token each roll emits, next to the target's distribution of that token; the target's
        logits after every node are computed once (one forward)."""
        temperature = self.sampling_temperature
        tree = step.tree
        with self._lock, torch.inference_mode():
            logits = self.verifier.node_logits(tree)
            g = torch.Generator(device=self.target.device).manual_seed(seed)
            counts: Counter = Counter()
            for _ in range(rolls):
                noise = gumbel(torch.rand(tree.max_depth + 1, logits.shape[-1], generator=g, device=logits.device))
                verdict = sampling_accept(tree, logits, temperature, noise)
                path = verdict.accepted_path
                counts[tree.token[path[1]] if len(path) > 1 else verdict.bonus_token] += 1
            dists = torch.softmax(logits / temperature, dim=-1)
            after = {u: dists[u].tolist() for u in step.accepted_path}
        return Reroll(temperature, counts, dists[0].tolist(), after)
