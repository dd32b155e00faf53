"""TALON's kernel with other prefetching against the kernel as it is: the model's 120 products in one
buffer, alternating every round, medians of 20 rounds.  A variant is the kernel at 44513f5 with a patch
beside this script applied: ``stream_gemm_far.patch`` (the default: the chunked passes with a second
prefetch FAR chunks ahead with hint FARHINT, the near one with NEARHINT, or none with NONEAR=1) or, with
``--patch stream_gemm_warm.patch``, each thread's first group's first WARM k-steps asked for at once
before it starts.

    PYTHONPATH=. python docs/bench/xeon-spr-r62/far_micro.py ROWS,... DEFINES...   e.g. 16,32 FAR=2:FARHINT=_MM_HINT_T1
"""

import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils import cpp_extension

from talon.models import stream_gemm

BASE = "44513f5"
name, flags = stream_gemm.BUILDS[stream_gemm.instruction_set()]
variants = {"current": stream_gemm.extension().linear}
args = sys.argv[1:]
patch = Path(__file__).with_name("stream_gemm_far.patch")
if "--patch" in args:
    at = args.index("--patch")
    patch = Path(__file__).with_name(args[at + 1])
    del args[at : at + 2]
sys.argv[1:] = args
source = Path(tempfile.mkdtemp()) / f"{patch.stem}.cpp"
source.write_text(subprocess.run(["git", "show", f"{BASE}:talon/models/csrc/stream_gemm.cpp"], capture_output=True, text=True, check=True).stdout)
subprocess.run(["patch", "-s", str(source), str(patch)], check=True)
for spec in sys.argv[2:]:
    defs = [f"-D{d}" for d in spec.split(":")]
    mod = cpp_extension.load(source.stem + "_" + spec.replace(":", "_").replace("=", ""), [str(source)], extra_cflags=flags + defs, extra_ldflags=["-fopenmp"])
    variants[spec] = mod.linear
rows_list = [int(r) for r in sys.argv[1].split(",")]
torch.manual_seed(0)
SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]
packs = [stream_gemm.pack(torch.randn(o, i) * 0.02) for _ in range(30) for o, i in SHAPES]
total = sum(p.numel() for p in packs)
arena = torch.empty(total + 1024)
off = (-arena.data_ptr() // 4) % 16
views = []
for p in packs:
    v = arena[off: off + p.numel()].view(p.shape); v.copy_(p); views.append(v); off += p.numel()
packed = [views[4 * l: 4 * l + 4] for l in range(30)]
for m in rows_list:
    xs = {i: torch.randn(m, i) for _, i in SHAPES}
    ref = [variants["current"](xs[i], p, o, None) for (o, i), p in zip(SHAPES, packed[0])]
    for fn in variants.values():
        for ((o, i), p), r in zip(zip(SHAPES, packed[0]), ref):
            assert torch.equal(fn(xs[i], p, o, None), r)
    times = {k: [] for k in variants}
    names = list(variants)
    for r in range(22):
        order = names if r % 2 else names[::-1]
        for k in order:
            fn = variants[k]
            t0 = time.perf_counter()
            for layer in packed:
                for (o, i), p in zip(SHAPES, layer):
                    fn(xs[i], p, o, None)
            if r >= 2:
                times[k].append(time.perf_counter() - t0)
    base = statistics.median(times["current"])
    print(f"{m:3d} rows: " + ", ".join(f"{k} {statistics.median(v)*1e3:.2f} ({statistics.median(v)/base:.3f})" for k, v in times.items()), flush=True)
