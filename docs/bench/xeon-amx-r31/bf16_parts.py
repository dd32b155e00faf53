# Run from the repository root: PYTHONPATH=. python docs/bench/xeon-amx-r31/bf16_parts.py [rounds]
"""bf16 on the AMX Xeon: verify(n) with the real linears (A), linears as a cached zero (Z), and the
row-invariant attention swapped for transformers' sdpa (S)."""
import sys, types
sys.path.insert(0, "docs/bench/fused-projections-zen4")
import torch
from interleaved import verify_ab
from talon.models.loading import load_model
from talon.models.cpu_linear import PackedLinear
torch.set_num_threads(2)
target = load_model("embedded", dtype=torch.bfloat16); model = target.model
print(model.config._attn_implementation)
inv = model.config._attn_implementation
lins = [m for m in model.modules() if isinstance(m, PackedLinear)]
orig = {id(m): m.forward for m in lins}
def zero_fwd(self, x):
    return torch.zeros(*x.shape[:-1], self.out_features, dtype=x.dtype) + 0.01
def setv(v):
    for m in lins:
        m.forward = types.MethodType(zero_fwd, m) if v == "Z" else orig[id(m)]
    model.set_attn_implementation("sdpa" if v == "S" else inv)
verify_ab(target, setv, "AZS", [1, 4, 16], int(sys.argv[1]) if len(sys.argv) > 1 else 15, restore="A")
