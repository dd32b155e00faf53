"""TALON's AVX2 kernel with half-block passes (``stream_gemm_half.patch`` beside this file, applied to the
kernel's source at a94ef9b (the AVX2 build with tiles of rows for a prefill): from
``TALON_HALF_FROM`` rows a pass multiplies one 8-lane vector of a 16-output block by up to
``TALON_HALF_ROWS`` rows, the block's two halves in turn) against the kernel as built, on the embedded
model's 120 float32 products of the fused forward (random weights of its shapes), least of 9 passes, ms;
every variant's output is checked bit for bit against the current kernel's.  From the repository root on
an AVX2 machine:

    PYTHONPATH=. python docs/bench/epyc-avx2-r38/half_block.py 12:7,8:7 1,4,6,7,8,10,12,16,24,32"""

import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils import cpp_extension

from talon.models import stream_gemm
from talon.models.cpu_linear import fastest_seconds

SOURCE = Path(tempfile.mkdtemp()) / "stream_gemm_half.cpp"
PATCH = Path(__file__).with_name("stream_gemm_half.patch")
subprocess.run(["patch", "-s", "-o", str(SOURCE), str(stream_gemm.SOURCE), str(PATCH)], check=True)
variants = {"current": stream_gemm.extension()}
for spec in sys.argv[1].split(","):
    rows, start = spec.split(":")
    variants[f"half{rows}from{start}"] = cpp_extension.load(
        f"talon_half_{rows}_{start}",
        [str(SOURCE)],
        extra_cflags=["-O3", "-mavx2", "-mfma", "-fopenmp", f"-DTALON_HALF_ROWS={rows}", f"-DTALON_HALF_FROM={start}"],
        extra_ldflags=["-fopenmp"],
    )
torch.manual_seed(0)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
weights = [torch.randn(o, i) * 0.05 for _ in range(30) for (o, i) in SHAPES]
packed = [stream_gemm.pack(w) for w in weights]
for rows in [int(r) for r in sys.argv[2].split(",")]:
    xs = [torch.randn(rows, w.shape[1]) for w in weights]
    bias = [torch.randn(w.shape[0]) for w in weights]
    want = [variants["current"].linear(x, p, w.shape[0], b) for x, p, w, b in zip(xs, packed, weights, bias)]
    out = []
    for name, module in variants.items():
        got = [module.linear(x, p, w.shape[0], b) for x, p, w, b in zip(xs, packed, weights, bias)]
        assert all(torch.equal(a, c) for a, c in zip(got, want)), name
        seconds = fastest_seconds(
            lambda xs=xs, m=module: [m.linear(x, p, w.shape[0], None) for x, p, w in zip(xs, packed, weights)], reps=9
        )
        out.append(f"{name} {seconds * 1e3:6.1f}")
    print(f"{rows:3d}: " + "  ".join(out), flush=True)
