"""The cost suite with ``talon.models.cpu_linear.SMALL_ROWS`` set for the run (how many rows the load may
give MKL): ``1,2`` is the code before run 32, ``1,2,3,4`` after it.  From the repository root:

    PYTHONPATH=. python docs/bench/xeon-amx-r32/cost_small_rows.py 1,2 OUT_DIR"""

import sys

import talon.models.cpu_linear as cpu_linear
from talon.bench.cli import main

cpu_linear.SMALL_ROWS = tuple(int(r) for r in sys.argv[1].split(","))
sys.exit(main(["--suite", "cost", "--out-dir", sys.argv[2]]))
