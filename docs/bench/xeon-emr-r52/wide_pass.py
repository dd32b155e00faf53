"""TALON's float32 kernel against variants that multiply 9 to WIDE rows in one pass of WIDE rows by GROUP
column blocks (``wide_pass.patch`` applied to a copy of ``talon/models/csrc/stream_gemm.cpp``, built
with -DWIDE_ROWS / -DWIDE_GROUP): the embedded model's 120 float32 products with random weights of its
shapes, least of 15 passes, ms; "DIFF" where a variant's bits differ from the kernel's (none should: every
output stays one chain of multiply-adds in column order).  From the repository root, nothing else running:

    PYTHONPATH=. python docs/bench/xeon-emr-r52/wide_pass.py 16x1,12x2,24x1 1,4,8,9,12,16,20,24,32"""

import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import torch
from torch.utils import cpp_extension

from talon.models import stream_gemm
from talon.models.cpu_linear import fastest_seconds

HERE = Path(__file__).parent
work = Path(tempfile.mkdtemp())
WIDE = work / "wide.cpp"
shutil.copy(stream_gemm.SOURCE, WIDE)
subprocess.run(["patch", "-s", str(WIDE), str(HERE / "wide_pass.patch")], check=True)

variants = {"kernel": stream_gemm.extension()}
for spec in sys.argv[1].split(","):
    rows, group = spec.split("x")
    variants[spec] = cpp_extension.load(
        f"talon_sg_wide_{rows}_{group}",
        [str(WIDE)],
        extra_cflags=["-O3", "-mavx512f", "-mfma", "-fopenmp", f"-DWIDE_ROWS={rows}", f"-DWIDE_GROUP={group}"],
        extra_ldflags=["-fopenmp"],
    )
torch.manual_seed(0)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
weights = [torch.randn(o, i) * 0.05 for _ in range(30) for (o, i) in SHAPES]
packed = [stream_gemm.pack(w) for w in weights]
for rows in [int(r) for r in sys.argv[2].split(",")]:
    xs = [torch.randn(rows, w.shape[1]) for w in weights]
    ref = [variants["kernel"].linear(x, p, w.shape[0], None) for x, p, w in zip(xs, packed, weights)]
    out = []
    for name, ext in variants.items():
        got = [ext.linear(x, p, w.shape[0], None) for x, p, w in zip(xs, packed, weights)]
        same = all(torch.equal(a, b) for a, b in zip(got, ref))
        t = fastest_seconds(
            lambda ext=ext, xs=xs: [ext.linear(x, p, w.shape[0], None) for x, p, w in zip(xs, packed, weights)]
        )
        out.append(f"{name} {t * 1e3:6.2f}{'' if same else ' DIFF'}")
    print(f"{rows:3d} rows: " + ", ".join(out), flush=True)
