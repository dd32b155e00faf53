# An experiment before the change (docs/bench/fused-projections-zen4/results.txt).
"""A/B: (A) as loaded, (C) gate/up fused, (D) C + q/k/v fused (stash trick, experiment only)."""
import sys, types
import torch
from torch import nn
from interleaved import logit_diffs, target_before_fusion, verify_ab
from talon.models.cpu_linear import PackedLinear

torch.set_num_threads(2)
target = target_before_fusion(); model = target.model
sizes = [int(s) for s in sys.argv[1].split(",")]
rounds = int(sys.argv[2])
mlps = [m for m in model.modules() if type(m).__name__.endswith("MLP")]
attns = [m for m in model.modules() if type(m).__name__.endswith("Attention")]
orig_mlp = {id(m): m.forward for m in mlps}

def fused(*lins):
    lin = nn.Linear(lins[0].in_features, sum(l.out_features for l in lins), bias=False)
    lin.weight = nn.Parameter(torch.cat([l.weight for l in lins]).contiguous(), requires_grad=False)
    f = PackedLinear(lin); f.plain_rows = lins[0].plain_rows
    return f
for m in mlps:
    m.gate_up = fused(m.gate_proj, m.up_proj)
def mlp_fwd(self, x):
    g, u = self.gate_up(x).chunk(2, dim=-1)
    return self.down_proj(self.act_fn(g) * u)

class Stash(nn.Module):
    def __init__(self, attn):
        super().__init__()
        self.qkv = fused(attn.q_proj, attn.k_proj, attn.v_proj)
        self.sizes = [attn.q_proj.out_features, attn.k_proj.out_features, attn.v_proj.out_features]
        self.last = None; self.parts = None
    def part(self, x, k):
        if k == 0 or x is not self.last:
            self.parts = self.qkv(x).split(self.sizes, dim=-1); self.last = x
        out = self.parts[k]
        if k == 2: self.last = None; self.parts = None
        return out
class Part(nn.Module):
    def __init__(self, stash, k, orig):
        super().__init__(); self.stash = [stash]; self.k = k; self.orig = orig
    def forward(self, x):
        return self.stash[0].part(x, self.k)
origs = {}
for a in attns:
    origs[id(a)] = (a.q_proj, a.k_proj, a.v_proj)
    st = Stash(a)
    a._parts = (Part(st, 0, a.q_proj), Part(st, 1, a.k_proj), Part(st, 2, a.v_proj))

def setv(v):
    for m in mlps:
        m.forward = types.MethodType(mlp_fwd, m) if v in "CD" else orig_mlp[id(m)]
    for a in attns:
        q, k, vv = a._parts if v == "D" else origs[id(a)]
        a.q_proj, a.k_proj, a.v_proj = q, k, vv

logit_diffs(target, setv, "ACD")
verify_ab(target, setv, "ACD", sizes, rounds, restore="A")
