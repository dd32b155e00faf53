"""The cost suite with the float32 packed kernel forced for the run: ``onednn`` (the code before run 33:
the load never tries MKL's packed sgemm) or ``auto`` (the load times the two and takes the faster).
From the repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r33/cost_packed_kernel.py onednn OUT_DIR"""

import sys

import talon.models.cpu_linear as cpu_linear
from talon.bench.cli import main

if sys.argv[1] == "onednn":
    cpu_linear.choose_packed_kernel = lambda module, sample=16: "onednn"
sys.exit(main(["--suite", "cost", "--out-dir", sys.argv[2]]))
