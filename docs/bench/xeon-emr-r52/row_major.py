"""TALON's float32 kernel reading x row-major against the revision that copied x transposed first
(``git show REV:talon/models/csrc/stream_gemm.cpp``, built beside it): the embedded model's 120 float32
products with random weights of its shapes at each row count, the two kernels alternating, least of 15
passes each, ms; "DIFF" where the bits differ (they must not: the same chains of multiply-adds).  From the
repository root, nothing else running:

    PYTHONPATH=. python docs/bench/xeon-emr-r52/row_major.py 3363172 1,2,4,8,12,16,24,32,64,512"""

import subprocess
import sys
import tempfile
from pathlib import Path

import torch

from talon.models import stream_gemm
from talon.models.cpu_linear import fastest_each

rev, counts = sys.argv[1], [int(r) for r in sys.argv[2].split(",")]
before = Path(tempfile.mkdtemp()) / "stream_gemm.cpp"
before.write_bytes(
    subprocess.run(
        ["git", "show", f"{rev}:{stream_gemm.SOURCE.relative_to(Path.cwd())}"], check=True, capture_output=True
    ).stdout
)
kernels = {
    "transposed copy": stream_gemm.load_build(stream_gemm.instruction_set(), source=before, suffix="_before"),
    "row-major": stream_gemm.extension(),
}
torch.manual_seed(0)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
weights = [torch.randn(o, i) * 0.05 for _ in range(30) for (o, i) in SHAPES]
packed = [stream_gemm.pack(w) for w in weights]
print(f"{stream_gemm.instruction_set()} build; ms for the 120 products (least of 15)")
for rows in counts:
    xs = [torch.randn(rows, w.shape[1]) for w in weights]

    def run(ext, xs=xs):
        return [ext.linear(x, p, w.shape[0], None) for x, p, w in zip(xs, packed, weights)]

    outs = {name: run(ext) for name, ext in kernels.items()}
    same = all(torch.equal(a, b) for a, b in zip(*outs.values()))
    times = fastest_each([lambda ext=ext: run(ext) for ext in kernels.values()])
    cells = ", ".join(f"{name} {t * 1e3:7.2f}" for name, t in zip(kernels, times))
    print(f"{rows:4d} rows: {cells}  ({times[1] / times[0]:.3f}){'' if same else '  DIFF'}", flush=True)
