"""A step's glue before and after, in the loop: the row_ops extension built from an earlier revision
(``/tmp/row_ops_before.cpp``, its norm and rotary loops unvectorised, PyTorch's silu then multiply) against
this one (vectorised loops, one thread up to 64 rows, ``silu(gate) * up`` in one call), on one loaded
target, alternating every round; a plain step through the real loop and verifications of 4 to 32 nodes,
medians.  The logits of a 40-token prefill and of one-row steps are compared bitwise first.

    git show REV:talon/models/csrc/row_ops.cpp > /tmp/row_ops_before.cpp
    PYTHONPATH=. python docs/bench/xeon-spr-r62/glue_ab.py ROUNDS
"""

import statistics
import sys

import torch
from glue_builds import mlps, target, use

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids

rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 20
print(f"MLPs with the one-call silu * up: {len(mlps)}", flush=True)

ids = context_ids(target)
with torch.inference_mode():
    out = {}
    for which in ("before", "after"):
        use(which)
        prefill = target.model(torch.tensor([ids[:40]])).logits
        out[which] = prefill
    assert torch.equal(out["before"].view(torch.int32), out["after"].view(torch.int32)), "prefill logits differ"
print("40-token prefill logits: the same bits", flush=True)

sizes = [4, 8, 16, 32]
pieces = _Pieces(target, NoDrafter(), ids, [1] + sizes, ())
times = {(w, s): [] for w in ("before", "after") for s in [0] + sizes}
for r in range(rounds + 2):
    for which in ("before", "after") if r % 2 else ("after", "before"):
        use(which)
        vals = {0: pieces.plain_step()}
        for s in sizes:
            vals[s] = pieces.verify(s)
        if r >= 2:
            for s, v in vals.items():
                times[(which, s)].append(v)
for which in ("before", "after"):
    plain = statistics.median(times[(which, 0)])
    cells = " ".join(
        f"verify({s}) {statistics.median(times[(which, s)]) * 1e3:.2f} ({statistics.median(times[(which, s)]) / plain:.3f})"
        for s in sizes
    )
    print(f"{which:6s} plain step {plain * 1e3:.2f} ms  {cells}")
for s in [0] + sizes:
    b, a = statistics.median(times[("before", s)]), statistics.median(times[("after", s)])
    print(f"{'plain step' if s == 0 else f'verify({s})'}: after / before {a / b:.3f}")
