"""A plain decoding step and verifications of 16 and 32 nodes on the embedded target, with TALON's kernel
as it is and as revision REV built it (the same packed weights: only the product's code differs), the
two alternating every round (``stream_gemm.extension`` swapped between rounds), median of ROUNDS rounds
after three warm-up rounds, ms and in plain steps of its own kernel.  From the repository root,
nothing else running:

    PYTHONPATH=. python docs/bench/xeon-emr-r52/step_ab.py 3363172 [ROUNDS]"""

import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models import stream_gemm
from talon.models.registry import ModelRegistry

rev = sys.argv[1]
ROUNDS = int(sys.argv[2]) if len(sys.argv) > 2 else 30
before = Path(tempfile.mkdtemp()) / "stream_gemm.cpp"
source = stream_gemm.SOURCE.relative_to(Path.cwd())
before.write_bytes(subprocess.run(["git", "show", f"{rev}:{source}"], check=True, capture_output=True).stdout)
builds = {
    f"kernel at {rev}": stream_gemm.load_build(stream_gemm.instruction_set(), source=before, suffix="_before"),
    "kernel now": stream_gemm.extension(),
}
lm = ModelRegistry().get("embedded")
pieces = _Pieces(lm, NoDrafter(), context_ids(lm), (1, 16, 32), ())
SIZES = (16, 32)
times = {name: {"plain": [], **{n: [] for n in SIZES}} for name in builds}
for r in range(ROUNDS + 3):
    order = list(builds.items()) if r % 2 == 0 else list(builds.items())[::-1]
    for name, ext in order:
        stream_gemm.extension = lambda ext=ext: ext
        got = {"plain": pieces.plain_step(), **{n: pieces.verify(n) for n in SIZES}}
        if r >= 3:
            for key, value in got.items():
                times[name][key].append(value)
for name, t in times.items():
    plain = statistics.median(t["plain"])
    cells = ", ".join(
        f"verify({n}) {statistics.median(t[n]) * 1e3:6.2f} ms = {statistics.median(t[n]) / plain:.2f}" for n in SIZES
    )
    print(f"{name:20s} plain step {plain * 1e3:6.2f} ms, {cells}")
