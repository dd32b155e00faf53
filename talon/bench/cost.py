"""The cost suite (``python -m talon.bench --suite cost``): what one step's pieces cost on this device,
as ratios to one autoregressive step, so a tree's price can be read off before it is run.

Measured on the current device, after a warm-up, median of ``reps`` wall-clock timings each:

* ``ar``: one autoregressive step (a one-row target forward, the LM head on that row, the argmax);
* ``target``: verifying a tree of ``size`` nodes (root included): one tree-masked target forward over
  ``size`` rows, the LM head on its internal rows, the acceptance walk (the engine's ``Verifier``),
  for ``size`` in ``TARGET_SIZES``; the trees are TALON trees the shipped draft head grows at a real
  context (budget ``size - 1``), so their internal-row counts are typical;
* ``head``: one draft-head call over a frontier of ``size`` nodes (the head's forward, its LM head on
  the draft vocabulary, the log-softmax), for ``size`` in ``HEAD_WIDTHS``.

Forwards take the path decoding takes: static runners replayed as CUDA graphs on a GPU
(``talon.runtime.graphs``; ``TALON_CUDA_GRAPHS=0`` measures the eager path), eager on a CPU.

``CostModel`` interpolates these rows to price a step: ``verify(nodes) + sum(head(width) per layer)``.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from ..drafters.factory import make_drafter
from ..drafters.head import HeadCache, HeadDrafter
from ..engine.builders import TalonBuilder
from ..engine.decode import encode_prompt
from ..engine.verify import Verifier
from ..models.device import synchronize
from ..models.loaded import LoadedModel
from ..models.registry import ModelRegistry
from ..tree import DraftTree
from .prompts import ASSETS_PROMPTS, read_prompts

TARGET_SIZES = (1, 2, 4, 8, 16, 32, 64, 128)
HEAD_WIDTHS = (1, 2, 4, 8, 16, 32, 64)
PREFIX_TOKENS = 256


def median_seconds(fn: Callable[[], None], device: torch.device, reps: int, warmup: int = 2) -> float:
    """Median wall clock of ``fn()`` over ``reps`` calls after ``warmup`` calls (synchronised on a GPU)."""
    for _ in range(warmup):
        fn()
    times = []
    for _ in range(reps):
        synchronize(device)
        t0 = time.perf_counter()
        fn()
        synchronize(device)
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def context_ids(target: LoadedModel, tokens: int = PREFIX_TOKENS) -> list[int]:
    """A real context of at least ``tokens`` tokens: the example prompts, chat-encoded, one after another."""
    ids: list[int] = []
    for item in read_prompts(ASSETS_PROMPTS):
        ids += encode_prompt(target, item["prompt"])
        if len(ids) >= tokens:
            break
    return ids[:tokens]


def _tree_of(head_drafter, verifier_ids: list[int], budget: int, target: LoadedModel) -> DraftTree:
    """A TALON tree of ``budget`` drafts grown by ``head_drafter`` at the context ``verifier_ids``."""
    if budget == 0:
        return DraftTree.with_root(verifier_ids[-1])
    verifier = Verifier(target, head_drafter.feature_layers)
    verifier.prefill(verifier_ids)
    head_drafter.start(verifier_ids, verifier.features)
    return TalonBuilder(budget, min(4, budget), 0.03).build(head_drafter, verifier_ids, verifier.features).tree


def measure_cost(
    target: LoadedModel,
    registry: ModelRegistry,
    drafter_spec: str = "head",
    reps: int = 15,
    target_sizes: Sequence[int] = TARGET_SIZES,
    head_widths: Sequence[int] = HEAD_WIDTHS,
    log: Callable[[str], None] = print,
) -> list[dict]:
    """The cost rows (``talon.bench.results.COST_COLUMNS``) of ``target`` and the draft head
    ``drafter_spec`` on this device."""
    ids = context_ids(target)
    rows = []
    rows_held = len(ids) + max(target_sizes) + 1  # the runs' own path: static runners (CUDA graphs) on a GPU
    with torch.inference_mode():
        verifier = Verifier(target, rows=rows_held)
        verifier.prefill(ids)

        def verify(tree: DraftTree) -> Callable[[], None]:
            def once() -> None:
                verifier.verify(tree, 0.0)
                verifier.drop_tree()

            return once

        ar = median_seconds(verify(DraftTree.with_root(ids[-1])), target.device, reps)
        rows.append({"component": "ar", "size": 1, "lm_head_rows": 1, "seconds": ar})
        log(f"ar step: {ar * 1e3:.1f} ms")
        drafter = make_drafter(drafter_spec, target, registry)
        for size in target_sizes:
            tree = _tree_of(drafter, ids, size - 1, target)
            internal = sum(1 for kids in tree.children_lists() if kids)
            seconds = median_seconds(verify(tree), target.device, reps)
            rows.append({"component": "target", "size": len(tree), "lm_head_rows": internal, "seconds": seconds})
            log(
                f"target forward over {len(tree)} nodes ({internal} LM-head rows): {seconds * 1e3:.1f} ms, "
                f"{seconds / ar:.2f}x AR"
            )
        verifier.close()
        if isinstance(drafter, HeadDrafter):
            rows += _head_rows(drafter, target, ids, head_widths, reps, ar, rows_held, log)
    return [{**r, "ratio": r["seconds"] / ar, "reps": reps, "prefix_tokens": len(ids)} for r in rows]


def _head_rows(
    drafter: HeadDrafter,
    target: LoadedModel,
    ids: list[int],
    widths: Sequence[int],
    reps: int,
    ar: float,
    rows_held: int,
    log: Callable[[str], None],
) -> list[dict]:
    """One head call (forward over a frontier, LM head on the draft vocabulary, log-softmax) per width,
    on the head's own tree KV cache after the context ``ids``."""
    verifier = Verifier(target, drafter.feature_layers)
    verifier.prefill(ids)
    features = drafter.head.fuse_features(verifier.features)
    cache = HeadCache(drafter.head, target, rows_held)
    cache.extend_committed(ids[1:], logit_rows=None, features=features)
    rows = []
    for width in widths:
        tree = DraftTree.with_root(ids[-1])
        frontier = [tree.add(0, t, -1.0) for t in range(width)]  # the cost is the shape's, not the tokens'
        states = features[-1:].expand(width, -1)

        def call(tree=tree, frontier=frontier, states=states) -> None:
            torch.log_softmax(cache.forward_nodes(tree, frontier, len(ids) - 1, features=states).logits, dim=-1)
            cache.drop_tree()

        seconds = median_seconds(call, target.device, reps)
        rows.append({"component": "head", "size": width, "lm_head_rows": width, "seconds": seconds})
        log(f"head call over {width} nodes: {seconds * 1e3:.1f} ms, {seconds / ar:.2f}x AR")
    cache.release()
    return rows


@dataclass
class CostModel:
    """Step prices from cost rows, as multiples of one autoregressive step (linear interpolation
    between measured sizes, linear extrapolation past the largest)."""

    target: list[tuple[int, float]]  # (tree nodes incl. root, ratio)
    head: list[tuple[int, float]]  # (frontier width, ratio)
    ar_seconds: float

    @classmethod
    def from_rows(cls, rows: Sequence[dict]) -> CostModel:
        pick = lambda c: sorted((int(r["size"]), float(r["ratio"])) for r in rows if r["component"] == c)  # noqa: E731
        ar = next(float(r["seconds"]) for r in rows if r["component"] == "ar")
        return cls(pick("target"), pick("head"), ar)

    @staticmethod
    def _at(points: list[tuple[int, float]], x: float) -> float:
        if not points:
            return 0.0
        if x <= points[0][0]:
            return points[0][1]
        for (x0, y0), (x1, y1) in zip(points, points[1:]):
            if x <= x1:
                return y0 + (y1 - y0) * (x - x0) / (x1 - x0)
        (x0, y0), (x1, y1) = points[-2:] if len(points) > 1 else (points[-1], points[-1])
        return y1 + (y1 - y0) * (x - x1) / (x1 - x0) if x1 != x0 else y1

    def verify(self, nodes: int) -> float:
        """Verifying a tree of ``nodes`` nodes (root included), in AR steps."""
        return self._at(self.target, nodes)

    def draft(self, layer_widths: Sequence[int]) -> float:
        """Drafting with the head, one call per layer of the given frontier widths, in AR steps."""
        return sum(self._at(self.head, w) for w in layer_widths)

    def step(self, nodes: int, layer_widths: Sequence[int]) -> float:
        """A whole step (draft + verify), in AR steps."""
        return self.verify(nodes) + self.draft(layer_widths)
