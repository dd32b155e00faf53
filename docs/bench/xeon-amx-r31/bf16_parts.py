# Run from the repository root: PYTHONPATH=. python docs/bench/xeon-amx-r31/bf16_parts.py [rounds]
"""bf16 on the AMX Xeon: verify(n) with the real linears (A), linears as a cached zero (Z), and the
row-invariant attention swapped for transformers' sdpa (S)."""
import sys
sys.path.insert(0, "docs/bench/fused-projections-zen4")
import torch
from interleaved import target_before_fusion, verify_ab, zero_linears
torch.set_num_threads(2)
target = target_before_fusion(torch.bfloat16); model = target.model  # measured before bfloat16 fused
inv = model.config._attn_implementation
print(inv)
switch = zero_linears(model)
def setv(v):
    switch(v == "Z")
    model.set_attn_implementation("sdpa" if v == "S" else inv)
verify_ab(target, setv, "AZS", [1, 4, 16], int(sys.argv[1]) if len(sys.argv) > 1 else 15, restore="A")
