"""The cost suite in bfloat16 with ``talon.models.row_invariant.CALL_ROWS`` set for the run (how many rows
one call of the blocked kernel may take): ``0`` is one block of 16 a call (before run 32's change),
``32`` two.  From the repository root:

    TALON_DTYPE=bfloat16 PYTHONPATH=. python docs/bench/xeon-amx-r32/cost_call_rows.py 0|32 OUT_DIR"""

import sys

import talon.models.row_invariant as row_invariant
from talon.bench.cli import main

row_invariant.CALL_ROWS = int(sys.argv[1])
sys.exit(main(["--suite", "cost", "--out-dir", sys.argv[2]]))
