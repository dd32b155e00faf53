"""Draft-head precisions side by side in one process, on the cost suite's pieces.

Usage: ``python docs/bench/xeon-spr-r66/head_ab.py ROUNDS [VARIANT ...]``.  Loads the embedded target once
and the shipped head once per variant: ``bf16`` (bfloat16 on oneDNN, int8 copies where
``draft_int8_rows`` times them faster) always, and each ``f32hN`` given (float32 on TALON's kernel, the
draft LM head streaming the target's codes, bfloat16 copies for calls of up to N rows); a variant ending
in ``-apart`` keeps each projection its own product (no ``fused_linear.fuse``).  Every round times, in a
shuffled order, each variant's first call after a step (``root``), second call (``call``) and later call
(``later``) over several widths, each right after a plain step; prints the median ratio to that step."""

import random
import statistics
import sys

import torch

import talon.drafters.head_model as head_model
import talon.models.cpu_linear as cpu_linear
from talon.drafters.head import HeadDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.registry import ModelRegistry


def load(target, name: str) -> HeadDrafter:
    as_before = head_model.drafter_dtype, head_model.halve_small_rows, cpu_linear.HALF_ROWS, head_model.fuse
    try:
        if name.endswith("-apart"):  # each projection its own product
            head_model.fuse = None
        if name.startswith("bf16"):
            head_model.drafter_dtype = lambda device, dtype: torch.bfloat16
            head_model.halve_small_rows = lambda module, fused=(): 0
        else:
            rows = int(name.removeprefix("f32h").removesuffix("-apart"))
            cpu_linear.HALF_ROWS = dict.fromkeys(as_before[2], rows)
        return HeadDrafter(head_model.load_head(head_model.SHIPPED_HEAD, target), target, name)
    finally:
        head_model.drafter_dtype, head_model.halve_small_rows, cpu_linear.HALF_ROWS, head_model.fuse = as_before


def main(rounds: int, names: list[str]) -> None:
    target = ModelRegistry().get("embedded")
    variants = {name: load(target, name) for name in ["bf16", *names]}
    ids = context_ids(target)
    widths = [1, 2, 4, 8, 16]
    pieces = _Pieces(target, variants["bf16"], ids, [1], widths)
    for drafter in variants.values():
        with torch.inference_mode():
            drafter.start(ids, pieces.features, len(ids) + max(widths) + 2)
    jobs = [("root", 0)] + [("call", w) for w in widths] + [("later", w) for w in (1, 2, 4, 8)]
    ratios = {name: {job: [] for job in jobs} for name in variants}
    order = random.Random(0)
    for r in range(rounds + 1):  # round 0 warms up
        runs = [(name, job) for name in variants for job in jobs]
        order.shuffle(runs)
        for name, job in runs:
            pieces.drafter = variants[name]
            unit = pieces.plain_step()
            seconds = pieces.time(*job)
            if r:
                ratios[name][job].append(seconds / unit)
    print("median plain steps a call;", rounds, "rounds")
    print(f"{'variant':8s} " + " ".join(f"{k}{w:<3d}" for k, w in jobs))
    for name in variants:
        print(f"{name:8s} " + " ".join(f"{statistics.median(ratios[name][job]):8.3f}" for job in jobs))


if __name__ == "__main__":
    main(int(sys.argv[1]), sys.argv[2:])
