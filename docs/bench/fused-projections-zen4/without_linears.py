# An experiment before the change (docs/bench/fused-projections-zen4/results.txt).
"""How much of verify(n) is not the linears: linears replaced by returning a cached zero tensor."""
import sys
import torch
from interleaved import target_before_fusion, verify_ab, zero_linears
torch.set_num_threads(2)
target = target_before_fusion()
switch = zero_linears(target.model)
verify_ab(target, lambda v: switch(v == "Z"), "AZ", [1, 4, 8, 16], int(sys.argv[1]) if len(sys.argv) > 1 else 20, restore="A")
