"""The cost suite with or without TALON's float32 streaming kernel (``talon.models.stream_gemm``) among
the packed kernels the load times: ``without`` is the code before run 35 (oneDNN's and MKL's packed
kernels only), ``auto`` the load as shipped.  From the repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r35/cost_stream.py without OUT_DIR"""

import sys

import talon.models.stream_gemm as stream_gemm
from talon.bench.cli import main

if sys.argv[1] == "without":
    stream_gemm.available = lambda: False
sys.exit(main(["--suite", "cost", "--out-dir", sys.argv[2]]))
