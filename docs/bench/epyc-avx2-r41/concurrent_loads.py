"""Load the embedded model in this process and print which packed kernel its float32 linears took, up to
how many rows PyTorch's own linear serves (``mkl_rows``), how long the load took, the share of the CPU
other processes took while it timed the kernels (printed only when it timed them) and the choices kept
for this machine.  Run two at once to see a busy load's choice:

    for r in 1 2 3; do PYTHONPATH=. python docs/bench/epyc-avx2-r41/concurrent_loads.py a$r & \\
        PYTHONPATH=. python docs/bench/epyc-avx2-r41/concurrent_loads.py b$r; wait; done
"""
import glob, json, os, sys, time

from talon.models import device

timed = device.OtherWork.__exit__


def report(self, *exc):
    timed(self, *exc)
    print("others' share while the kernels were timed:", self.share, flush=True)


device.OtherWork.__exit__ = report
from talon.models.cpu_linear import mkl_rows, packed_kernel  # noqa: E402
from talon.models.embedded import cache_root  # noqa: E402
from talon.models.registry import ModelRegistry  # noqa: E402

t0 = time.time()
target = ModelRegistry().get("embedded")
kept = [json.load(open(f)) for f in glob.glob(os.path.join(cache_root(), "kernel-choices", "*.json"))]
print(sys.argv[1] if len(sys.argv) > 1 else "load", "kernel", packed_kernel(target.model), "mkl_rows",
      mkl_rows(target.model), "load s", round(time.time() - t0, 1),
      "kept", [(k["kernel"], k["plain_rows"], k["other_share"]) for k in kept], flush=True)
