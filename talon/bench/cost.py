"""The cost suite (``python -m talon.bench --suite cost``): what one step's pieces cost on this device,
as ratios to one plain decoding step, so a tree's price can be read off before it is run.

It is the cost curve the app and the engine size trees by (``talon.engine.cost_measure.measure_curve``:
a plain step through the real loop, verifying trees of 1 to 128 nodes, drafter calls per frontier
width, each the median of its ratios to the plain step timed just before it), written as ``cost.csv``
rows and stored in the curve cache too, so a later auto-sized run on this machine uses exactly what the
suite measured:

* ``ar``: one plain decoding step (the unit);
* ``target``: verifying a tree of ``size`` nodes (root included; the LM head on ``lm_head_rows`` rows in
  one call, and the leaf's row in a second where more than four leaves kept it out);
* ``head``: a step's second drafter call, over a frontier of ``size`` nodes (for any drafter, not only
  a head);
* ``head_later``: a drafter call over ``size`` nodes right after another call of the same step (its
  third and later calls, the drafter's weights still in the caches);
* ``first_call``: a step's first drafter call after a step that committed ``size`` tokens (the
  drafter catching up with them, then proposing after the root);
* ``bookkeeping``: what a drafted step's bookkeeping adds (the drafter and the calibration reading the
  verdict);
* ``builder``: the tree builder's own work per drafter call (choosing, gating and sizing from the
  call's answer), over drafted steps of the device's default tree sized by the other pieces.

Forwards take the path decoding takes: static runners replayed as CUDA graphs on a GPU
(``talon.runtime.graphs``; ``TALON_CUDA_GRAPHS=0`` measures the eager path), eager on a CPU.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..drafters.factory import make_drafter
from ..engine.cost_measure import ROOT_TOKENS, curve_key, heap_tree, measure_curve
from ..engine.verify import logit_nodes
from ..models.loaded import LoadedModel
from ..models.registry import ModelRegistry
from ..runtime.cost_curve import CostCurve, cached_curve, store_curve

SINGLE_PIECES = (("first_call", "root", ROOT_TOKENS, 1), ("bookkeeping", "observe", 1, 0), ("builder", "builder", 1, 0))
"""The curve's one-number pieces as ``cost.csv`` rows: component, ``CostCurve`` field, size, LM head rows."""
BUILDER_PREFIX = "builder_"
"""``cost.csv`` component of another method's builder work (``CostCurve.builders``): ``builder_eagle2``."""


def curve_rows(curve: CostCurve, reps: int) -> list[dict]:
    """``cost.csv`` rows (``talon.bench.results.COST_COLUMNS``) of a measured curve."""
    rows = [{"component": "ar", "size": 1, "lm_head_rows": 1, "seconds": curve.plain}]
    for size, seconds in curve.verify:
        rows.append(
            {
                "component": "target",
                "size": size,
                "lm_head_rows": len(logit_nodes(heap_tree(0, size, [0], chain=[0] * size))),
                "seconds": seconds,
            }
        )
    rows += [{"component": "head", "size": w, "lm_head_rows": w, "seconds": s} for w, s in curve.call]
    rows += [{"component": "head_later", "size": w, "lm_head_rows": w, "seconds": s} for w, s in curve.later]
    for component, name, size, lm_head_rows in SINGLE_PIECES:
        if seconds := getattr(curve, name):
            rows.append({"component": component, "size": size, "lm_head_rows": lm_head_rows, "seconds": seconds})
    rows += [
        {"component": BUILDER_PREFIX + method, "size": 1, "lm_head_rows": 0, "seconds": s}
        for method, s in curve.builders
    ]
    return [{**r, "ratio": r["seconds"] / curve.plain, "reps": reps, "prefix_tokens": None} for r in rows]


def curve_from_rows(rows: Sequence[dict]) -> CostCurve:
    """The cost curve of ``cost.csv`` rows (this suite's, or an older results directory's)."""
    pick = lambda c: tuple(sorted((int(r["size"]), float(r["seconds"])) for r in rows if r["component"] == c))  # noqa: E731
    plain = next(float(r["seconds"]) for r in rows if r["component"] == "ar")
    singles = {
        name: next((float(r["seconds"]) for r in rows if r["component"] == component), 0.0)
        for component, name, _, _ in SINGLE_PIECES
    }
    builders = tuple(
        (r["component"].removeprefix(BUILDER_PREFIX), float(r["seconds"]))
        for r in rows
        if r["component"].startswith(BUILDER_PREFIX)
    )
    return CostCurve(
        plain=plain,
        verify=pick("target"),
        call=pick("head"),
        later=pick("head_later"),
        builders=builders,
        note="from cost.csv rows",
        **singles,
    )


@dataclass(frozen=True)
class CostMeasurement:
    """What the cost suite measured: its ``cost.csv`` rows, the share of the machine's CPU other processes
    took meanwhile (``CostCurve.other_share``; None: not known) and whether the curve went into the curve
    cache (a busy machine's does not replace a cached one)."""

    rows: list[dict]
    other_share: float | None
    cached: bool


def measure_cost(
    target: LoadedModel,
    registry: ModelRegistry,
    drafter_spec: str = "head",
    reps: int = 9,
    log: Callable[[str], None] = print,
) -> CostMeasurement:
    """The cost rows of ``target`` and the drafter ``drafter_spec`` on this device.  The curve is stored in
    the curve cache as well (what auto-sized runs here then use), by the rule the app's "measure again"
    follows: one measured while other processes took ``QUIET_SHARE`` of the CPU or more does not replace a
    cached curve (``log`` says so; the rows are still written, with that share in the results)."""
    drafter = make_drafter(drafter_spec, target, registry)
    curve = measure_curve(target, drafter, reps=reps, progress=log, note="python -m talon.bench --suite cost")
    key = curve_key(target, drafter)
    keep = not (curve.busy and cached_curve(key) is not None)
    if keep:
        store_curve(curve, key)
    rows = curve_rows(curve, reps)
    for r in rows:
        log(f"{r['component']:>6} size {r['size']:3d}: {r['seconds'] * 1e3:7.1f} ms, {r['ratio']:.2f}x a plain step")
    if curve.busy:
        log(
            f"warning: other processes took {curve.other_share:.0%} of the CPU while this was measured, so these "
            "ratios are a busy machine's; "
            + (
                "the curve cached for auto-sized runs here was kept (measure again on a quiet machine)."
                if not keep
                else "no curve was cached for auto-sized runs here, so this one is, until one is measured quietly."
            )
        )
    return CostMeasurement(rows, curve.other_share, keep)
