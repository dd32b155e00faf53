# Run from the repository root: PYTHONPATH=. python docs/bench/xeon-amx-r31/bf16_fusion_ab.py [rounds]
"""bfloat16 target with its projections fused (as loaded now) against separate (the loader without
fusion), both row-invariant: logits of one 128-token forward compared, then verify(n) in interleaved,
shuffled rounds (the cost suite's pieces), medians."""
import random
import statistics
import sys

import torch

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models import loading
from talon.models.fused_linear import fused_layers

torch.set_num_threads(2)
fused = loading.load_model("embedded", dtype=torch.bfloat16)
fuse = loading.fuse_projections
loading.fuse_projections = lambda model: 0
separate = loading.load_model("embedded", dtype=torch.bfloat16)
loading.fuse_projections = fuse
print("fused layers", fused_layers(fused.model), fused_layers(separate.model), fused.model.config._attn_implementation)
x = torch.tensor([context_ids(fused)])
with torch.inference_mode():
    a, b = fused.model(x).logits, separate.model(x).logits
print("logits bit-identical:", torch.equal(a, b))
sizes = [1, 4, 16, 32]
pieces = {"fused": _Pieces(fused, NoDrafter(), context_ids(fused), sizes, ()),
          "separate": _Pieces(separate, NoDrafter(), context_ids(separate), sizes, ())}
times = {(v, s): [] for v in pieces for s in sizes}
for _ in range(int(sys.argv[1]) if len(sys.argv) > 1 else 20):
    order = list(times)
    random.shuffle(order)
    for v, s in order:
        pieces[v].verify(s)
        times[(v, s)].append(pieces[v].verify(s))
for s in sizes:
    f, p = statistics.median(times[("fused", s)]), statistics.median(times[("separate", s)])
    print(f"verify({s}): fused {f * 1e3:.2f} ms, separate {p * 1e3:.2f} ms, fused / separate {f / p:.3f}")
