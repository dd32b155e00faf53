"""Measuring the device's cost curve (``talon.runtime.cost_curve``) for a target and drafter: a plain
decoding step through the real loop, verifying trees of 1 to 128 nodes, and one drafter call per
frontier width, each the least of a few wall-clock timings (on a machine shared with other work the
least is the piece's own cost; a median drifts with the neighbours' load, and only ratios are used).
About ten seconds on the 2-core CPU; the result is cached next to the model cache and reused until
``refresh``.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict
from datetime import UTC, datetime

import torch

from ..config import ASSETS, DecodeConfig, TreeConfig
from ..drafters.base import Drafter, NoDrafter
from ..models.cpu_linear import cpu_linear_mode
from ..models.device import device_label, synchronize
from ..models.loaded import LoadedModel
from ..runtime.cost_curve import CostCurve, CurveKey, cached_curve, store_curve
from ..runtime.graphs import graphs_setting
from ..trace import StepRecord
from ..tree import DraftTree
from .decode import encode_prompt, new_trace, run
from .verify import Verifier

VERIFY_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
"""Tree sizes (nodes, root included) whose verification is timed."""
CALL_WIDTHS = (1, 2, 4, 8, 16, 32, 64)
"""Frontier widths whose drafter call is timed."""
CONTEXT_TOKENS = 128
PLAIN_TOKENS = 64
"""Length of the plain run whose steps are timed (one per round)."""
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


def heap_tree(root: int, nodes: int, tokens: Sequence[int]) -> DraftTree:
    """A tree of ``nodes`` nodes (root included) shaped like a binary heap: about half the nodes are
    internal, as in the TALON trees the head grows, so the LM head runs on a typical number of rows."""
    tree = DraftTree.with_root(root)
    for i in range(1, nodes):
        tree.add((i - 1) // 2, tokens[i % len(tokens)], -1.0)
    return tree


class _Pieces:
    """The timed pieces of a step, each callable once per round: a plain decoding step through the real
    loop (a long plain run advanced one step at a time), verifying a tree of each size, and a drafter
    call over each frontier width (the drafter restarts its step before each call, off the clock)."""

    def __init__(
        self, target: LoadedModel, drafter: Drafter, ids: list[int], sizes: Sequence[int], widths: Sequence[int]
    ) -> None:
        self.target, self.drafter, self.ids = target, drafter, ids
        self.plain = self._plain_run()
        self.verifier = Verifier(target, rows=len(ids) + max(sizes) + 1)
        self.trees = {size: heap_tree(ids[-1], size, ids) for size in sizes}
        self.widths = widths if not isinstance(drafter, NoDrafter) else ()
        self.features = None
        if self.widths:
            feed = Verifier(target, drafter.feature_layers)
            feed.prefill(ids)
            self.features = feed.features
            drafter.start(ids, self.features, len(ids) + max(self.widths) + 2)
        with torch.inference_mode():
            self.verifier.prefill(ids)

    def _plain_run(self) -> Iterator[StepRecord]:
        cfg, dec = TreeConfig(method="ar"), DecodeConfig(max_new_tokens=PLAIN_TOKENS)
        steps = run(new_trace(self.target, None, cfg, dec, "", self.ids), self.target, None, cfg, dec)
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
        tree = DraftTree.with_root(self.ids[-1])
        frontier = [tree.add(0, self.ids[k % len(self.ids)], -1.0) for k in range(width)]

        def once() -> None:
            logprobs = self.drafter.propose(tree, frontier).logprobs
            logprobs.topk(min(8, logprobs.shape[-1]), dim=-1)[0].max().item()

        with torch.inference_mode():
            self.drafter.begin_step(self.ids, self.features)
            return timed(once, self.target.device)

    def close(self) -> None:
        self.plain.close()
        self.verifier.close()
        self.drafter.release()


def curve_key(target: LoadedModel, drafter: Drafter) -> CurveKey:
    return CurveKey(
        target=target.identity or target.name,
        drafter=drafter.name or "none",
        dtype=str(target.dtype).removeprefix("torch."),
        device=device_label(target),
        threads=torch.get_num_threads(),
        kernels=f"cpu_linear={cpu_linear_mode()}, graphs={graphs_setting()}",
        torch=torch.__version__,
    )


def measure_curve(
    target: LoadedModel,
    drafter: Drafter | None,
    reps: int = 6,
    progress: Progress | None = None,
    note: str = "measured on first use",
    sizes: Sequence[int] = VERIFY_SIZES,
    widths: Sequence[int] = CALL_WIDTHS,
) -> CostCurve:
    """Measure the cost curve of ``target`` with ``drafter`` (None: plain decoding) on this device: ``reps``
    rounds, each timing every piece once (so a busy spell on a shared machine touches all pieces alike),
    then the least time of each piece (its own cost; ratios between pieces are what prices use)."""
    report = progress or (lambda line: None)
    drafter = drafter or NoDrafter()
    ids = context_ids(target)
    pieces = _Pieces(target, drafter, ids, sizes, widths)
    plain, verify, call = [], {n: [] for n in sizes}, {w: [] for w in pieces.widths}
    try:
        for k in range(reps + 1):  # round 0 warms up
            report(f"Measuring this machine's cost curve: round {k} of {reps}...")
            keep = k > 0
            p = pieces.plain_step()
            plain += [p] if keep else []
            for n in sizes:
                t = pieces.verify(n)
                verify[n] += [t] if keep else []
            for w in pieces.widths:
                t = pieces.call(w)
                call[w] += [t] if keep else []
    finally:
        pieces.close()
    return CostCurve(
        plain=min(plain),
        verify=tuple((n, min(ts)) for n, ts in verify.items()),
        call=tuple((w, min(ts)) for w, ts in call.items()),
        key=asdict(curve_key(target, drafter)),
        measured=datetime.now(UTC).isoformat(timespec="seconds"),
        note=note,
    )


def cost_curve_for(
    target: LoadedModel,
    drafter: Drafter | None,
    *,
    refresh: bool = False,
    measure: bool = True,
    progress: Progress | None = None,
) -> CostCurve | None:
    """The cached cost curve of ``target`` with ``drafter`` on this device; measured (and cached) when
    there is none or ``refresh``, unless ``measure`` is False (then None)."""
    key = curve_key(target, drafter or NoDrafter())
    curve = None if refresh else cached_curve(key)
    if curve is None and (measure or refresh):
        curve = measure_curve(target, drafter, progress=progress)
        store_curve(curve, key)
    return curve


def curve_for_run(
    target: LoadedModel, drafter: Drafter | None, tree_cfg: TreeConfig, progress: Progress | None = None
) -> CostCurve | None:
    """The cost curve a run of ``tree_cfg`` should carry: for an auto-sized tree the device's curve,
    measured now if none is cached; for a fixed one the cached curve if any (steps are then priced),
    never measured."""
    return cost_curve_for(target, drafter, measure=tree_cfg.auto, progress=progress)
