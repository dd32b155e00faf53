"""Measuring the device's cost curve (``talon.runtime.cost_curve``) for a target and drafter: a plain
decoding step through the real loop, verifying trees of 1 to 128 nodes, and one drafter call per
frontier width, each the median of a few wall-clock timings.  A few seconds on the 2-core CPU; the
result is cached next to the model cache and reused until ``refresh``.
"""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable, Sequence
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
from ..tree import DraftTree
from .decode import encode_prompt, new_trace, run
from .verify import Verifier

VERIFY_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
"""Tree sizes (nodes, root included) whose verification is timed."""
CALL_WIDTHS = (1, 2, 4, 8, 16, 32, 64)
"""Frontier widths whose drafter call is timed."""
CONTEXT_TOKENS = 128
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


def median_seconds(
    fn: Callable[[], None], device: torch.device, reps: int, warmup: int = 1, setup: Callable[[], None] | None = None
) -> float:
    """Median wall clock of ``fn()`` over ``reps`` calls after ``warmup`` (``setup()`` before each call,
    off the clock; synchronised on a GPU)."""
    times = []
    for k in range(warmup + reps):
        if setup is not None:
            setup()
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        if k >= warmup:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def heap_tree(root: int, nodes: int, tokens: Sequence[int]) -> DraftTree:
    """A tree of ``nodes`` nodes (root included) shaped like a binary heap: about half the nodes are
    internal, as in the TALON trees the head grows, so the LM head runs on a typical number of rows."""
    tree = DraftTree.with_root(root)
    for i in range(1, nodes):
        tree.add((i - 1) // 2, tokens[i % len(tokens)], -1.0)
    return tree


def plain_step_seconds(target: LoadedModel, ids: list[int], reps: int = 3, tokens: int = 12) -> float:
    """Median step time of plain decoding through the real loop (first step of each run left out)."""
    cfg, dec = TreeConfig(method="ar"), DecodeConfig(max_new_tokens=tokens)
    times = []
    for _ in range(reps + 1):
        trace = new_trace(target, None, cfg, dec, "", ids)
        for step in run(trace, target, None, cfg, dec):
            if step.index > 0:
                times.append(step.step_seconds)
    return statistics.median(times[tokens - 1 :] or times)


def verify_points(target: LoadedModel, ids: list[int], sizes: Sequence[int], reps: int) -> list[tuple[int, float]]:
    with torch.inference_mode():
        verifier = Verifier(target, rows=len(ids) + max(sizes) + 1)
        verifier.prefill(ids)
        points = []
        for size in sizes:
            tree = heap_tree(ids[-1], size, ids)

            def once(tree=tree) -> None:
                verifier.verify(tree, 0.0)
                verifier.drop_tree()

            points.append((size, median_seconds(once, target.device, reps)))
        verifier.close()
    return points


def call_points(
    target: LoadedModel, drafter: Drafter, ids: list[int], widths: Sequence[int], reps: int
) -> list[tuple[int, float]]:
    """One drafter call over ``width`` children of the root (and the builder's top-k and read-back of
    its answer), per width; the drafter restarts its step before each call, off the clock."""
    with torch.inference_mode():
        verifier = Verifier(target, drafter.feature_layers)
        verifier.prefill(ids)
        features = verifier.features
        drafter.start(ids, features, len(ids) + max(widths) + 2)
        points = []
        for width in widths:
            tree = DraftTree.with_root(ids[-1])
            frontier = [tree.add(0, ids[k % len(ids)], -1.0) for k in range(width)]

            def setup() -> None:
                drafter.begin_step(ids, features)

            def once(tree=tree, frontier=frontier) -> None:
                logprobs = drafter.propose(tree, frontier).logprobs
                logprobs.topk(min(8, logprobs.shape[-1]), dim=-1)[0].max().item()

            points.append((width, median_seconds(once, target.device, reps, setup=setup)))
        drafter.release()
    return points


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
    reps: int = 5,
    progress: Progress | None = None,
    note: str = "measured on first use",
    sizes: Sequence[int] = VERIFY_SIZES,
    widths: Sequence[int] = CALL_WIDTHS,
) -> CostCurve:
    """Measure the cost curve of ``target`` with ``drafter`` (None: plain decoding) on this device."""
    report = progress or (lambda line: None)
    drafter = drafter or NoDrafter()
    ids = context_ids(target)
    report("Measuring this machine's cost curve: a plain decoding step...")
    plain = plain_step_seconds(target, ids)
    report(f"Cost curve: plain step {plain * 1e3:.1f} ms; verifying trees of {sizes[0]} to {sizes[-1]} nodes...")
    verify = verify_points(target, ids, sizes, reps)
    calls: list[tuple[int, float]] = []
    if not isinstance(drafter, NoDrafter):
        report(f"Cost curve: drafter calls over {widths[0]} to {widths[-1]} nodes...")
        calls = call_points(target, drafter, ids, widths, reps)
    return CostCurve(
        plain=plain,
        verify=tuple(verify),
        call=tuple(calls),
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
