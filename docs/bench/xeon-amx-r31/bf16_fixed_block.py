# Run from the repository root: PYTHONPATH=. python docs/bench/xeon-amx-r31/bf16_fixed_block.py
import torch
from torch import nn
from talon.models.cpu_linear import pack_linears
torch.set_num_threads(2)
op = torch.ops.mkldnn._linear_pointwise
for B in (8, 16, 32, 33):
    ok=True
    for i,o in [(576,576),(576,192),(576,1536),(1536,576),(576,49152)]:
        torch.manual_seed(1)
        p = nn.Sequential(nn.Linear(i,o,bias=False).to(torch.bfloat16)); pack_linears(p); lin=p[0]
        x = torch.randn(B, i).to(torch.bfloat16)
        with torch.inference_mode():
            ref = op(x, lin.packed, None, "none", [], "")
            for r in range(B):
                y = torch.randn(B, i).to(torch.bfloat16); y[r] = x[0]
                ok &= torch.equal(op(y, lin.packed, None, "none", [], "")[r], ref[0])
    print(B, ok)
