"""A prompt's prefill through the embedded model's float32 linears (two layers' query/key/value 576 -> 960,
output 576 -> 576, gate/up 576 -> 3072, down 1536 -> 576; random weights of those shapes) at row counts
past the largest tree: PyTorch's own linear (MKL's sgemm), oneDNN's packed kernel, TALON's kernel as
built now (tiles of rows past 128 rows) and, with ``--before REV``, the kernel's source at git revision
``REV`` built beside it (an older build: one pass over all rows).  Least of 5 passes, milliseconds; every
build's output is checked bit for bit against the current one.  From the repository root:

    PYTHONPATH=. python docs/bench/epyc-avx2-r37/prefill_rows.py --before 1db08f2"""

import argparse
import subprocess
import tempfile
from pathlib import Path

import torch
import torch.nn.functional as F

from talon.models import stream_gemm
from talon.models.cpu_linear import fastest_seconds

parser = argparse.ArgumentParser()
parser.add_argument("--before", help="a git revision whose stream_gemm.cpp is built and timed beside")
args = parser.parse_args()

kernels = {"stream": stream_gemm.extension()}
if args.before:
    folder = Path(tempfile.mkdtemp())
    source = folder / "stream_gemm_before.cpp"
    relative = stream_gemm.SOURCE.relative_to(Path.cwd())
    source.write_text(
        subprocess.run(["git", "show", f"{args.before}:{relative}"], capture_output=True, text=True, check=True).stdout
    )
    kernels[f"stream at {args.before}"] = stream_gemm.load_build(
        stream_gemm.instruction_set(), str(folder), source, suffix="_before"
    )

torch.manual_seed(0)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
weights = [torch.randn(o, i) * 0.05 for _ in range(2) for (o, i) in SHAPES]
onednn = [torch.ops.mkldnn._reorder_linear_weight(w, 64) for w in weights]
packed = [stream_gemm.pack(w) for w in weights]

for rows in (129, 256, 512, 1024, 2048, 4096):
    xs = [torch.randn(rows, w.shape[1]) for w in weights]
    times = {
        "F.linear": fastest_seconds(lambda xs=xs: [F.linear(x, w) for x, w in zip(xs, weights)], reps=5),
        "oneDNN packed": fastest_seconds(
            lambda xs=xs: [torch.ops.mkldnn._linear_pointwise(x, p, None, "none", [], "") for x, p in zip(xs, onednn)],
            reps=5,
        ),
    }
    want = [kernels["stream"].linear(x, p, w.shape[0], None) for x, p, w in zip(xs, packed, weights)]
    for label, module in kernels.items():
        got = [module.linear(x, p, w.shape[0], None) for x, p, w in zip(xs, packed, weights)]
        assert all(torch.equal(a, b) for a, b in zip(got, want)), f"{label}: other bits"
        times[label] = fastest_seconds(
            lambda xs=xs, m=module: [m.linear(x, p, w.shape[0], None) for x, p, w in zip(xs, packed, weights)], reps=5
        )
    print(f"{rows:5d} rows: " + ", ".join(f"{k} {v * 1e3:7.1f} ms" for k, v in times.items()), flush=True)
