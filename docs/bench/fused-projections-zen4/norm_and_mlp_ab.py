# An experiment before the change (docs/bench/fused-projections-zen4/results.txt).
"""A/B: the embedded target's verify(n) with (A) as loaded, (B) RMSNorm -> torch.rms_norm,
(C) B + gate/up as one packed linear.  Interleaved rounds, medians; plus exactness of logits."""
import sys, types
import torch
from torch import nn
from interleaved import logit_diffs, target_before_fusion, verify_ab
from talon.models.cpu_linear import PackedLinear

torch.set_num_threads(2)
target = target_before_fusion()
model = target.model
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

logit_diffs(target, setv, "ABC")
verify_ab(target, setv, "ABC", sizes, rounds, restore="A")
