"""End to end, the glue before and after (see glue_ab.py): ``ar`` and TALON auto at the CPU defaults
(one cached cost curve for both) on the headline suite's first N prompts, greedy, 64 tokens, the four
runs in an order alternating per prompt, one loaded target; total times and the tokens compared.

    git show REV:talon/models/csrc/row_ops.cpp > /tmp/row_ops_before.cpp
    PYTHONPATH=. python docs/bench/xeon-spr-r62/glue_e2e.py N
"""

import sys
from pathlib import Path

from glue_builds import registry, target, use

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from side_by_side import ar_and_talon_auto  # noqa: E402  (docs/bench/side_by_side.py)

RUNS = int(sys.argv[1]) if len(sys.argv) > 1 else 30
ar_and_talon_auto(target, registry, use, ("before", "after"), new="after", old="before", runs=RUNS)
