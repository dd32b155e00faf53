# Run from the repository root: PYTHONPATH=. python docs/bench/xeon-amx-r31/bf16_row_counts.py
import torch
from torch import nn
from talon.models.cpu_linear import pack_linears
torch.set_num_threads(2)
torch.manual_seed(0)
for i,o in [(576,576),(576,192),(576,1536),(1536,576),(576,49152)]:
    p = nn.Sequential(nn.Linear(i,o,bias=False).to(torch.bfloat16)); pack_linears(p); lin=p[0]
    x = torch.randn(160, i).to(torch.bfloat16)
    op = torch.ops.mkldnn._linear_pointwise
    with torch.inference_mode():
        ref = op(x, lin.packed, None, "none", [], "")
        groups = {}
        for n in list(range(1,40))+[48,63,64,65,96,128,160]:
            y = op(x[:n], lin.packed, None, "none", [], "")
            same = torch.equal(y, ref[:n])
            # compare to n=1 pattern
            y1 = torch.cat([op(x[j:j+1], lin.packed, None, "none", [], "") for j in range(min(n,4))])
            groups.setdefault(same, []).append(n)
        print((i,o), "same as 160:", groups.get(True), " differ:", groups.get(False))
