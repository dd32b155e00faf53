# An experiment before the change (docs/bench/fused-projections-zen4/results.txt).
"""A/B: the embedded target's verify(n) with (A) as loaded, (B) RMSNorm -> torch.rms_norm,
(C) B + gate/up as one packed linear.  Interleaved rounds, medians; plus exactness of logits."""
import random, statistics, sys, time, types
import torch
from torch import nn
from talon.models.registry import ModelRegistry
from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models.cpu_linear import PackedLinear

torch.set_num_threads(2)
reg = ModelRegistry()
target = reg.get("embedded")
model = target.model
ids = context_ids(target)
sizes = [int(s) for s in (sys.argv[1] if len(sys.argv) > 1 else "1,4,8,16").split(",")]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 20
norms = [m for m in model.modules() if type(m).__name__.endswith("RMSNorm")]
mlps = [m for m in model.modules() if type(m).__name__.endswith("MLP")]
orig_norm = {id(m): m.forward for m in norms}
orig_mlp = {id(m): m.forward for m in mlps}

def norm_fwd(self, x):
    return torch.rms_norm(x, (x.shape[-1],), self.weight, self.variance_epsilon)

for m in mlps:
    lin = nn.Linear(m.gate_proj.in_features, 2 * m.gate_proj.out_features, bias=False)
    lin.weight = nn.Parameter(torch.cat([m.gate_proj.weight, m.up_proj.weight]).contiguous(), requires_grad=False)
    m.gate_up = PackedLinear(lin)
    m.gate_up.plain_rows = m.gate_proj.plain_rows

def mlp_fwd(self, x):
    g, u = self.gate_up(x).chunk(2, dim=-1)
    return self.down_proj(self.act_fn(g) * u)

def setv(v):
    for m in norms:
        m.forward = types.MethodType(norm_fwd, m) if v in "BC" else orig_norm[id(m)]
    for m in mlps:
        m.forward = types.MethodType(mlp_fwd, m) if v == "C" else orig_mlp[id(m)]

# exactness: logits of a 16-row verification of the context, per variant
x = torch.tensor([ids])
outs = {}
with torch.inference_mode():
    for v in "ABC":
        setv(v)
        outs[v] = model(x).logits[0]
for v in "BC":
    d = (outs[v] - outs["A"]).abs().max().item()
    same = (outs[v].argmax(-1) == outs["A"].argmax(-1)).float().mean().item()
    print(f"{v}: max |logit diff| {d:.3g}, argmax agree {same:.4f}")

p = _Pieces(target, NoDrafter(), ids, sizes, ())
times = {(v, s): [] for v in "ABC" for s in sizes}
for r in range(rounds):
    order = [(v, s) for v in "ABC" for s in sizes]
    random.shuffle(order)
    for v, s in order:
        setv(v)
        p.verify(s)
        times[(v, s)].append(p.verify(s))
setv("A")
for s in sizes:
    a = statistics.median(times[("A", s)])
    print(f"verify({s}): " + "  ".join(f"{v} {statistics.median(times[(v, s)])*1e3:.2f} ms ({statistics.median(times[(v, s)])/a:.3f})" for v in "ABC"))
p.close() if hasattr(p, "close") else None
