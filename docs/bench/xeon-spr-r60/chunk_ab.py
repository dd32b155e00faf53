"""TALON's float32 kernel with and without chunks, in the loop: a plain decoding step and verifications
of 4 to 32 nodes on the embedded target, the kernel's revision before this change (built from git, the
same packed layout) and the chunked one alternating every round (``stream_gemm.extension`` swapped);
medians of ROUNDS rounds after three warm-up rounds, ms and in plain steps of the same revision.  Every
verification's outputs are compared bitwise between the two.  From the repository root, nothing else
running:

    git show BEFORE:talon/models/csrc/stream_gemm.cpp > /tmp/stream_gemm_before.cpp
    PYTHONPATH=. python docs/bench/xeon-spr-r60/chunk_ab.py [ROUNDS] [/tmp/stream_gemm_before.cpp]
"""

import statistics
import sys
from pathlib import Path

import torch

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models import stream_gemm
from talon.models.registry import ModelRegistry

ROUNDS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
BEFORE = Path(sys.argv[2] if len(sys.argv) > 2 else "/tmp/stream_gemm_before.cpp")
SIZES = (4, 8, 12, 16, 24, 32)
builds = {"before": stream_gemm.load_build(stream_gemm.instruction_set(), source=BEFORE, suffix="_before")}
builds["chunked"] = stream_gemm.extension()
target = ModelRegistry().get("embedded")
pieces = _Pieces(target, NoDrafter(), context_ids(target), (1, *SIZES), ())
real = stream_gemm.extension


def use(name: str) -> None:
    stream_gemm.extension = lambda: builds[name]


same = True
with torch.inference_mode():
    for n in SIZES:
        outs = []
        for name in builds:
            use(name)
            outs.append(pieces.verifier.verify(pieces.trees[n], 0.0))
            pieces.verifier.drop_tree()
        same &= outs[0].accepted_path == outs[1].accepted_path
times = {name: {"plain": [], **{n: [] for n in SIZES}} for name in builds}
for r in range(ROUNDS + 3):
    for name in list(builds) if r % 2 == 0 else list(builds)[::-1]:
        use(name)
        got = {"plain": pieces.plain_step(), **{n: pieces.verify(n) for n in SIZES}}
        if r >= 3:
            for key, value in got.items():
                times[name][key].append(value)
stream_gemm.extension = real
print(f"verdicts equal under both revisions: {same}")
for name, t in times.items():
    plain = statistics.median(t["plain"])
    cells = ", ".join(f"verify({n}) {(v := statistics.median(t[n])) * 1e3:6.2f} ms = {v / plain:.3f}" for n in SIZES)
    print(f"{name:8s} plain step {plain * 1e3:6.2f} ms, {cells}")
