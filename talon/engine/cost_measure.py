"""Measuring the device's cost curve (``talon.runtime.cost_curve``) for a target and drafter: a plain
decoding step through the real loop, verifying trees of 1 to 128 nodes, a step's second drafter call
and a later one per frontier width, a step's first call and bookkeeping, and the tree builder's own
work per call.  Only ratios to a plain step are used, so each piece is timed as a ratio to a plain step
timed just before it, the rounds take the pieces in a shuffled order, and the curve keeps each piece's
median ratio: on a machine shared with other work (a VM whose neighbours come and go) the load drifts
within seconds, and a piece timed at a quiet moment against a plain step timed at a busy one is a wrong
price.  25 to 45 s on a 2-core CPU; the result is cached next to the model cache and reused until
``refresh``.
"""

from __future__ import annotations

import json
import math
import random
import statistics
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, replace
from datetime import UTC, datetime

import torch
from torch import nn

from ..config import ASSETS, AUTO_CAP, DecodeConfig, TreeConfig, device_default_tree
from ..drafters.base import Drafter, NoDrafter, Proposal
from ..drafters.calibration import Calibration
from ..models import row_ops, row_top, stream_gemm
from ..models.cpu_linear import (
    block_rows,
    call_rows,
    cpu_linear_mode,
    draft_half_rows,
    draft_int8_rows,
    drafter_on_stream,
    mkl_rows,
    packed_kernel,
)
from ..models.device import OtherWork, cpu_identity, device_label, openmp_wait, synchronize
from ..models.fused_linear import fused_layers
from ..models.gpu_linear import lt_signature
from ..models.gqa_attention import runs_few_rows_attention
from ..models.lm_head import head_name
from ..models.loaded import LoadedModel
from ..models.row_ops import uses_row_ops
from ..models.row_top import row_topk
from ..models.weight_arena import coded_weights, gathered_bytes
from ..runtime.cost_curve import CostCurve, CurveKey, cached_curve, store_curve
from ..runtime.graphs import graphs_setting
from ..trace import StepRecord
from ..tree import DraftTree, Verdict
from .builders import TreeBuilder, make_builder
from .decode import encode_prompt, new_trace, run
from .sizing import CostRule
from .verify import Verifier

VERIFY_SIZES = (1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 32, 64, 128)
"""Tree sizes (nodes, root included) whose verification is timed: every size up to 8, because a CPU's
kernels are not monotone in the row count there (on the 2-core Zen 4, oneDNN's packed kernel verified
3 to 6 rows in 0.96-0.99 of a one-row step and 2, 7 or 8 rows in 1.10-1.11), then wider apart."""
CALL_WIDTHS = (1, 2, 4, 8, 16, 32, 64)
"""Frontier widths whose drafter call is timed."""
CONTEXT_TOKENS = 128
PLAIN_TOKENS = 64
"""Length of the plain run whose steps are timed (one before each timed piece; started again at its end)."""
ROOT_TOKENS = 2
"""Tokens the step before a timed first call committed (a head suite step commits 2.0-2.5 on average):
the first call feeds the drafter those rows before it proposes after the root."""
MEASUREMENT = "round ratios, median, every size to 8, first call, later calls, bookkeeping and builder work per method"
"""Names how ``measure_curve`` measures (part of a curve's key): a curve cached by another way of
measuring (other statistics, other sizes timed, other pieces priced) is measured again, not reused."""
BUILDER_METHODS = ("talon", "eagle2")
"""Methods whose builders' work is measured apart (hybrid builds TALON's tree: its builder is TALON's)."""
BUILDER_STEPS = 3
"""The fewest drafted steps of the device's default tree, sized by the curve's other pieces, whose
builder work is timed (as many as rounds when there are more; each after a plain step, its ratio to
that step; the median counts)."""
ROUNDS = 8
"""Rounds (after the one that warms up) a curve measured on first use or on request takes."""
Progress = Callable[[str], None]


def context_ids(target: LoadedModel, tokens: int = CONTEXT_TOKENS) -> list[int]:
    """A real context of ``tokens`` tokens: the example prompts, chat-encoded, one after another."""
    ids: list[int] = []
    for line in (ASSETS / "prompts.jsonl").read_text(encoding="utf-8").splitlines():
        if line.strip():
            ids += encode_prompt(target, json.loads(line)["prompt"])
        if len(ids) >= tokens:
            break
    return ids[:tokens]


def timed(fn: Callable[[], None], device: torch.device) -> float:
    """Wall clock of one ``fn()`` (synchronised on a GPU)."""
    synchronize(device)
    t0 = time.perf_counter()
    fn()
    synchronize(device)
    return time.perf_counter() - t0


CHAIN_LOGPROB = math.log(0.8)
"""Draft log-probability of each node on a measured tree's leftmost path (the target's own greedy
continuation, which a useful drafter proposes with confidence); every other node has log-probability
-1.  A walk that runs down an accepted chain to a leaf then finds the leaf's row in the one LM head call
(``talon.engine.verify.LEAF_HEAD_PROB``), as four in five such walks did in the headline suite's auto
runs; with -1 everywhere the leaf of a deep chain would fall under that bar and every measured tree would
pay a second LM head call that runs rarely pay."""


def heap_tree(root: int, nodes: int, tokens: Sequence[int], chain: Sequence[int] = ()) -> DraftTree:
    """A tree of ``nodes`` nodes (root included) shaped like a binary heap: about half the nodes are
    internal, as in the TALON trees the head grows, so the LM head runs on a typical number of rows.
    ``chain``: tokens for the leftmost path (nodes 1, 3, 7, ...), e.g. the target's own greedy
    continuation, so verification walks down to a leaf as it does after an accepted chain; they carry
    ``CHAIN_LOGPROB``, the other nodes take ``tokens`` in turn at log-probability -1."""
    tree = DraftTree.with_root(root)
    for i in range(1, nodes):
        depth = (i + 1).bit_length() - 1
        on_chain = i + 1 == 1 << depth and depth <= len(chain)
        if on_chain:
            tree.add((i - 1) // 2, chain[depth - 1], CHAIN_LOGPROB)
        else:
            tree.add((i - 1) // 2, tokens[i % len(tokens)], -1.0)
    return tree


def _read_back(proposal: Proposal) -> None:
    """What a builder does with a drafter's answer before it can choose: a top-k on the device (the
    builders' own, ``row_topk``: on the CPU one C++ call, against PyTorch's top-k's 0.2 ms a 49,152-token
    row), read back (the host waits for the call's work here)."""
    logprobs = proposal.logprobs
    row_topk(logprobs, min(8, logprobs.shape[-1]))[0].max().item()


class _ClockedDrafter(Drafter):
    """A drafter whose calls are timed: ``seconds`` adds up the wall clock of every ``begin_step`` and
    ``propose`` (synchronised, answer read back), so that a build's time less ``seconds`` is the
    builder's own work."""

    def __init__(self, drafter: Drafter, device: torch.device) -> None:
        self.inner, self.device = drafter, device
        self.name, self.feature_layers = drafter.name, drafter.feature_layers
        self.can_draft_ahead, self.calibration_prior = drafter.can_draft_ahead, drafter.calibration_prior
        self.seconds = 0.0

    def _timed(self, call: Callable[[], Proposal]) -> Proposal:
        synchronize(self.device)
        t0 = time.perf_counter()
        proposal = call()
        _read_back(proposal)
        self.seconds += time.perf_counter() - t0
        return proposal

    def start(
        self, prompt_ids: Sequence[int], target_features: torch.Tensor | None = None, rows: int | None = None
    ) -> None:
        self.inner.start(prompt_ids, target_features, rows)

    def begin_step(self, committed_ids: Sequence[int], target_features: torch.Tensor | None = None) -> Proposal:
        return self._timed(lambda: self.inner.begin_step(committed_ids, target_features))

    def propose(self, tree: DraftTree, frontier: Sequence[int]) -> Proposal:
        return self._timed(lambda: self.inner.propose(tree, frontier))

    @property
    def network(self) -> nn.Module | None:
        return self.inner.network

    def observe(self, tree: DraftTree, verdict: Verdict) -> None:
        self.inner.observe(tree, verdict)

    def release(self) -> None:
        self.inner.release()


class _Pieces:
    """The timed pieces of a step, each callable once per round: a plain decoding step through the real
    loop (a long plain run advanced one step at a time), verifying a tree of each size, a step's second
    drafter call and a later one over each frontier width (the drafter restarts its step before each, off
    the clock, with the calls before it), a step's first call after a step that committed ``ROOT_TOKENS``
    tokens, a drafted step's bookkeeping (the drafter and a calibration observing a verdict), and the
    builder's own work in a drafted step."""

    def __init__(
        self, target: LoadedModel, drafter: Drafter, ids: list[int], sizes: Sequence[int], widths: Sequence[int]
    ) -> None:
        self.target, self.drafter, self.ids = target, drafter, ids
        self.plain = self._plain_run()
        chain = [s.committed_ids[0] for s in self._plain_run(max(sizes).bit_length(), skip_first=False)]
        self.verifier = Verifier(target, drafter.feature_layers, rows=len(ids) + max(sizes) + 1)
        self.trees = {size: heap_tree(ids[-1], size, ids, chain) for size in sizes}
        self.widths = widths if not isinstance(drafter, NoDrafter) else ()
        self.features = None
        # Inference mode throughout: on a GPU the runners come from the model's pool, whose tensors a
        # run made under inference mode, and may only be written under it.
        with torch.inference_mode():
            if self.widths:
                feed = Verifier(target, drafter.feature_layers)
                feed.prefill(ids)
                self.features = feed.features
                drafter.start(ids, self.features, len(ids) + max(self.widths) + 2)
            self.verifier.prefill(ids)
            self.observed = self.trees[max(n for n in sizes if n <= 16)]
            self.verdict = self.verifier.verify(self.observed, 0.0)
            self.verifier.drop_tree()

    def _plain_run(self, tokens: int = PLAIN_TOKENS, skip_first: bool = True) -> Iterator[StepRecord]:
        """Plain decoding of ``tokens`` tokens after the context, one step per ``next``."""
        cfg, dec = TreeConfig(method="ar"), DecodeConfig(max_new_tokens=tokens)
        steps = run(new_trace(self.target, None, cfg, dec, "", self.ids), self.target, None, cfg, dec)
        if skip_first:
            next(steps)  # the first step of a run is not a typical one
        return steps

    def plain_step(self) -> float:
        try:
            return next(self.plain).step_seconds
        except StopIteration:  # the run ended (EOS): start another
            self.plain = self._plain_run()
            return next(self.plain).step_seconds

    def verify(self, size: int) -> float:
        def once() -> None:
            self.verifier.verify(self.trees[size], 0.0)
            self.verifier.drop_tree()

        with torch.inference_mode():
            return timed(once, self.target.device)

    def call(self, width: int) -> float:
        """A step's second drafter call, over ``width`` nodes below the root."""
        tree = DraftTree.with_root(self.ids[-1])
        return self._proposal(tree, [tree.add(0, self.ids[k % len(self.ids)], -1.0) for k in range(width)])

    def later(self, width: int) -> float:
        """A drafter call over ``width`` nodes after another call of the same step (the step's third call:
        its first and second, off the clock, have just read the drafter's weights)."""
        tree = DraftTree.with_root(self.ids[-1])
        first = tree.add(0, self.ids[0], -1.0)
        frontier = [tree.add(first, self.ids[k % len(self.ids)], -1.0) for k in range(width)]
        return self._proposal(tree, frontier, before=[first])

    def _proposal(self, tree: DraftTree, frontier: list[int], before: list[int] | None = None) -> float:
        """The wall clock of one ``propose(tree, frontier)``, its answer read back, after the drafter
        restarted its step at the context (and, with ``before``, proposed below those nodes), off the clock."""

        def once() -> None:
            _read_back(self.drafter.propose(tree, frontier))

        with torch.inference_mode():
            self.drafter.begin_step(self.ids, self.features)
            if before:
                _read_back(self.drafter.propose(tree, before))
            return timed(once, self.target.device)

    def _step_back(self) -> None:
        """Start the drafter's step ``ROOT_TOKENS`` tokens before the context (off the clock), so that
        its next step at the context is a run's step after a step that committed them."""
        short = len(self.ids) - ROOT_TOKENS
        self.drafter.begin_step(self.ids[:short], self.features[:short] if self.features is not None else None)

    def root(self) -> float:
        """The step's first call after a step that committed ``ROOT_TOKENS`` tokens."""

        def once() -> None:
            _read_back(self.drafter.begin_step(self.ids, self.features))

        with torch.inference_mode():
            self._step_back()
            return timed(once, self.target.device)

    def observe(self) -> float:
        """A drafted step's bookkeeping: the drafter and a calibration observing a verdict."""
        calibration = Calibration(self.drafter.calibration_prior)

        def once() -> None:
            self.drafter.observe(self.observed, self.verdict)
            calibration.observe(self.observed, self.verdict)

        return timed(once, self.target.device)

    def builder(self, builder: TreeBuilder, rule: CostRule) -> float | None:
        """``builder``'s own work per drafter call in one drafted step sized by ``rule``, at the context
        after a step that committed ``ROOT_TOKENS`` tokens; None when the step made no call."""
        clocked = _ClockedDrafter(self.drafter, self.target.device)
        built = []

        def once() -> None:
            built.append(builder.build(clocked, self.ids, self.features, rule=rule))

        with torch.inference_mode():
            self._step_back()
            seconds = timed(once, self.target.device)
        calls = len(built[0].call_widths)
        return (seconds - clocked.seconds) / calls if calls else None

    def time(self, kind: str, size: int) -> float:
        """``verify(size)``, ``call(size)``, ``later(size)``, ``root()`` or ``observe()`` by ``kind``."""
        if kind == "verify":
            return self.verify(size)
        if kind == "call":
            return self.call(size)
        if kind == "later":
            return self.later(size)
        return self.root() if kind == "root" else self.observe()

    def close(self) -> None:
        self.plain.close()
        self.verifier.close()
        self.drafter.release()


def curve_key(target: LoadedModel, drafter: Drafter) -> CurveKey:
    graphs = graphs_setting()
    if graphs == "on" and target.device.type == "cuda":
        # the graphs' bucket and key-span rules set a forward's price: a curve cached under other rules
        # is measured again
        graphs += " (rows in the cheapest bucket, keys in spans)"
    return CurveKey(
        target=target.identity or target.name,
        drafter=drafter.name or "none",
        dtype=str(target.dtype).removeprefix("torch."),
        device=device_label(target),
        threads=torch.get_num_threads(),
        kernels=f"cpu_linear={cpu_linear_mode()}, mkl_rows={mkl_rows(target.model)}, graphs={graphs}, "
        f"fused_layers={fused_layers(target.model)}, "
        # the norm and rotary embedding (row_ops) and the picks' argmax / top-k (row_top) share a source
        + ("row_ops=on, " if uses_row_ops(target.model) else "")
        + (f"row_picks=on {row_ops.source_digest()}, " if target.device.type == "cpu" and row_top.active() else "")
        + f"attention={getattr(target.model.config, '_attn_implementation', None)}"
        + (" with C++ rows, " if runs_few_rows_attention(target.model) else ", ")
        + f"lm_head={head_name(target)}"
        + (f", block_rows={rows}" if (rows := block_rows(target.model)) else "")
        + (f", call_rows={rows}" if (rows := call_rows(target.model)) else "")
        # oneDNN's curves keep their keys; TALON's kernel names its source (another revision is timed again)
        + (f", packed={kernel}" if (kernel := packed_kernel(target.model)) not in (None, "onednn") else "")
        + (f" {stream_gemm.source_digest()}" if kernel == "stream" else "")
        + (", weights in one arena" if gathered_bytes(target.model) else "")
        + (", weights as their 4- or 8-bit codes" if coded_weights(target.model) else "")
        + (f", gpu_linear={lt}" if (lt := lt_signature(target.model)) else "")
        + (f", draft_fused_layers={n}" if (net := drafter.network) is not None and (n := fused_layers(net)) else "")
        + (
            # a float32 drafter on TALON's kernel has no int8 copies (and their timing is not asked for)
            (
                f", draft_half_rows={draft_half_rows()}"
                if drafter_on_stream()
                else f", draft_int8_rows={draft_int8_rows()}"
            )
            if target.device.type == "cpu" and not isinstance(drafter, NoDrafter)
            else ""
        )
        # the default wait adds nothing to the key, so curves cached without a wait setting stay valid
        + (f", openmp_wait=({wait})" if target.device.type == "cpu" and (wait := openmp_wait()) else ""),
        torch=torch.__version__,
        method=MEASUREMENT,
        cpu=cpu_identity(),
    )


def measure_curve(
    target: LoadedModel,
    drafter: Drafter | None,
    reps: int | None = None,
    progress: Progress | None = None,
    note: str = "measured on first use",
    sizes: Sequence[int] = VERIFY_SIZES,
    widths: Sequence[int] = CALL_WIDTHS,
) -> CostCurve:
    """Measure the cost curve of ``target`` with ``drafter`` (None: plain decoding) on this device.
    ``reps`` rounds (``ROUNDS`` where None; after one that warms up), each timing every piece once
    (verify(1), which every price is a difference from, three times) in a shuffled order, each right
    after a plain step; a piece's price is the median over the rounds of its time over that plain
    step's, and the curve holds those ratios times the median plain step.  Verification keeps each
    size's median as measured: a bigger tree can cost less (a kernel's blocking for a few rows beats its
    one-row path), and a tree builder that reads the curve should see it.  Call times are made
    non-decreasing in width (a wider frontier never costs less: there a dip is noise).  Then, with the
    curve those pieces make, the tree builder's own work per call (``_builder_seconds``)."""
    report = progress or (lambda line: None)
    reps = ROUNDS if reps is None else reps
    drafter = drafter or NoDrafter()
    ids = context_ids(target)
    report("Measuring this machine's cost curve: preparing (a short plain run, the context prefilled)...")
    pieces = _Pieces(target, drafter, ids, sizes, widths)
    # Every price is a difference from verify(1), so it is timed three times a round.
    jobs = [("verify", n) for n in sizes] + [("verify", 1)] * 2
    jobs += [(kind, w) for kind in ("call", "later") for w in pieces.widths]
    if pieces.widths:
        jobs += [("root", 0), ("observe", 0)]
    order = random.Random(0)
    plain: list[float] = []
    ratios: dict[tuple[str, int], list[float]] = {job: [] for job in set(jobs)}
    with OtherWork() as others:
        try:
            for k in range(reps + 1):  # round 0 warms up
                report(f"Measuring this machine's cost curve: round {k + 1} of {reps + 1} (the first warms up)...")
                order.shuffle(jobs)
                for job in jobs:
                    unit = pieces.plain_step()
                    seconds = pieces.time(*job)
                    if k > 0:
                        plain.append(unit)
                        ratios[job].append(seconds / unit)
            curve = _curve(ratios, statistics.median(plain), sizes, pieces.widths)
            if pieces.widths:
                report("Measuring this machine's cost curve: the tree builders' own work...")
                cfg, _ = device_default_tree(target.device.type == "cuda")
                steps = max(reps, BUILDER_STEPS)
                builders = tuple(  # the device's default tree (auto), then with each other builder's method
                    (
                        method,
                        _builder_seconds(
                            pieces, make_builder(replace(cfg, method=method, budget=AUTO_CAP, auto=True)), curve, steps
                        ),
                    )
                    for method in dict.fromkeys((cfg.method, *BUILDER_METHODS))
                )
                curve = replace(curve, builder=builders[0][1], builders=builders[1:])
        finally:
            pieces.close()
    return replace(
        curve,
        key=asdict(curve_key(target, drafter)),
        measured=datetime.now(UTC).isoformat(timespec="seconds"),
        note=note,
        other_share=None if others.share is None else round(others.share, 4),
    )


def _curve(
    ratios: dict[tuple[str, int], list[float]], unit: float, sizes: Sequence[int], widths: Sequence[int]
) -> CostCurve:
    """The curve of the rounds' ratios (``measure_curve``) and the median plain step ``unit``."""

    def points(kind: str, xs: Sequence[int], monotone: bool) -> tuple[tuple[int, float], ...]:
        out, floor = [], 0.0
        for x in xs:
            seconds = statistics.median(ratios[(kind, x)]) * unit
            floor = max(floor, seconds) if monotone else seconds
            out.append((x, floor))
        return tuple(out)

    def piece(kind: str) -> float:
        return statistics.median(ratios[(kind, 0)]) * unit if (kind, 0) in ratios else 0.0

    return CostCurve(
        plain=unit,
        verify=points("verify", sizes, monotone=False),
        call=points("call", widths, monotone=True),
        later=points("later", widths, monotone=True),
        root=piece("root"),
        observe=piece("observe"),
    )


def _builder_seconds(pieces: _Pieces, builder: TreeBuilder, curve: CostCurve, steps: int) -> float:
    """``builder``'s own work per drafter call: ``steps`` drafted steps sized by ``curve`` (the other
    pieces), each right after a plain step; the median of its ratios to that step, times the curve's
    plain step (0 when no step made a call)."""
    rule = CostRule(Calibration(pieces.drafter.calibration_prior), curve, sizing=True)
    ratios = []
    for k in range(steps + 1):  # the first warms up
        unit = pieces.plain_step()
        seconds = pieces.builder(builder, rule)
        if k > 0 and seconds is not None:
            ratios.append(seconds / unit)
    return max(statistics.median(ratios), 0.0) * curve.plain if ratios else 0.0


class _Measuring:
    """One lock per curve key, so that two runs in one process (two users of the app) needing the same
    uncached curve measure it once: measured side by side on the same cores, both curves would be
    wrong.  Curves whose cache file could not be written are kept here for the process's life (a
    read-only cache must not mean 20-40 s of measuring every run).  Holds device facts only."""

    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}
        self.unstored: dict[str, CostCurve] = {}

    def lock(self, digest: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(digest, threading.Lock())


_MEASURING = _Measuring()


NOT_KEPT = "measured again while the machine was busy: not kept"
"""The ``note`` of a curve ``cost_curve_for`` measured again and did not keep."""


def cost_curve_for(
    target: LoadedModel,
    drafter: Drafter | None,
    *,
    refresh: bool = False,
    measure: bool = True,
    progress: Progress | None = None,
) -> CostCurve | None:
    """The cached cost curve of ``target`` with ``drafter`` on this device; measured (and cached) when
    there is none or ``refresh``, unless ``measure`` is False (then None).  A curve whose cache file
    cannot be written is still returned (and reused by this process), with a note to ``progress``.  A
    curve measured again (``refresh``) while other processes took ``QUIET_SHARE`` of the machine or more
    (``CostCurve.busy``) does not replace a cached one: it is returned with the note ``NOT_KEPT``, and
    runs keep the cached curve."""
    key = curve_key(target, drafter or NoDrafter())
    digest = key.digest()

    def known() -> CostCurve | None:  # the cached curve, or the one this process keeps where none could be
        return cached_curve(key) or _MEASURING.unstored.get(digest)

    if not refresh:
        curve = known()
        if curve is not None or not measure:
            return curve
    with _MEASURING.lock(digest):
        curve = None if refresh else known()
        if curve is None:  # not measured meanwhile by a run that held the lock
            note = "measured again" if refresh else "measured on first use"
            curve = measure_curve(target, drafter, progress=progress, note=note)
            if refresh and curve.busy and known() is not None:  # a busy machine's prices must not replace it
                if progress is not None:
                    progress(f"Measured while other processes used {curve.other_share:.0%} of the CPU: not kept.")
                return replace(curve, note=NOT_KEPT)
            try:
                store_curve(curve, key)
                _MEASURING.unstored.pop(digest, None)
            except OSError as err:
                _MEASURING.unstored[digest] = curve
                if progress is not None:
                    progress(f"Cost curve measured but not cached ({err}); this process keeps it.")
    return curve


def curve_for_run(
    target: LoadedModel, drafter: Drafter | None, tree_cfg: TreeConfig, progress: Progress | None = None
) -> CostCurve | None:
    """The cost curve a run of ``tree_cfg`` should carry: for an auto-sized tree the device's curve,
    measured now if none is cached; for a fixed one the cached curve if any (steps are then priced),
    never measured."""
    return cost_curve_for(target, drafter, measure=tree_cfg.auto, progress=progress)
