# Run from the repository root: PYTHONPATH=. python docs/bench/xeon-amx-r31/bf16_padding.py
import torch, time
from torch import nn
from talon.models.cpu_linear import pack_linears, PackedLinear
torch.set_num_threads(2)
shapes=[]
for _ in range(30):
    shapes += [(576,576),(576,192),(576,192),(576,576),(576,1536),(576,1536),(1536,576)]
shapes.append((576,49152))
lins=[]
for i,o in shapes:
    p=nn.Sequential(nn.Linear(i,o,bias=False).to(torch.bfloat16)); pack_linears(p); lins.append(p[0])
def t(fn):
    r=[]
    for _ in range(11):
        s=time.perf_counter(); fn(); r.append(time.perf_counter()-s)
    r.sort(); return r[5]*1e3
x1={576:torch.randn(1,1,576).to(torch.bfloat16),1536:torch.randn(1,1,1536).to(torch.bfloat16)}
x16={576:torch.randn(16,576).to(torch.bfloat16),1536:torch.randn(16,1536).to(torch.bfloat16)}
op=torch.ops.mkldnn._linear_pointwise
with torch.inference_mode():
    for l in lins: l.block_rows=16
    for _ in range(2):
        print("forward 1 row, blocks of 16", f"{t(lambda:[l(x1[l.in_features]) for l in lins]):.1f}")
        print("raw packed 16 rows", f"{t(lambda:[op(x16[l.in_features], l.packed, None,'none',[],'') for l in lins]):.1f}")
        print("raw packed 1 row", f"{t(lambda:[op(x1[l.in_features], l.packed, None,'none',[],'') for l in lins]):.1f}")
        # chained: each input is the previous output (cache realistic)
        def chain():
            h=x1[576]
            for l in lins[:-1]:
                inp = h if l.in_features==h.shape[-1] else (x1[l.in_features])
                out=l(inp)
                h = out if out.shape[-1] in (576,) else h
            lins[-1](h)
        print("forward chained", f"{t(chain):.1f}")
