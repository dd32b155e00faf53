"""The bfloat16 screen against the float32 LM head streamed as its 8-bit codes, side by side in one process.

Usage: ``python docs/bench/xeon-spr-r66/screen_ab.py ROUNDS``.  Loads the embedded target once and
alternates its head between the screen (``ScreenedHead.for_model``) and none (the float32 head, which
streams the tied embedding's Q8_0 codes); each round times a plain step and verify(4 / 8 / 16) with each.
Prints the medians in ms."""

import statistics
import sys

import torch

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.lm_head import ScreenedHead
from talon.models.registry import ModelRegistry


def main(rounds: int) -> None:
    target = ModelRegistry().get("embedded")
    heads = {"screen": ScreenedHead.for_model(target.model), "float32 codes": None}
    pieces = _Pieces(target, NoDrafter(), context_ids(target), [1, 4, 8, 16], [])
    jobs = [("plain", 1), ("verify", 4), ("verify", 8), ("verify", 16)]
    ms = {name: {job: [] for job in jobs} for name in heads}
    for r in range(rounds + 1):  # round 0 warms up
        for name, head in heads.items():
            object.__setattr__(target, "screen", head)
            for job in jobs:
                seconds = pieces.plain_step() if job[0] == "plain" else pieces.verify(job[1])
                if r:
                    ms[name][job].append(seconds * 1e3)
    print(f"median ms over {rounds} rounds (torch {torch.__version__})")
    for name in heads:
        print(f"{name:14s} " + " ".join(f"{k}({n}) {statistics.median(v):6.2f}" for (k, n), v in ms[name].items()))


if __name__ == "__main__":
    main(int(sys.argv[1]))
