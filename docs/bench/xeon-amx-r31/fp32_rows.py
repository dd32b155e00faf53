# Run from the repository root: PYTHONPATH=. python docs/bench/xeon-amx-r31/fp32_rows.py
import torch, time
from torch import nn
torch.set_num_threads(2)
F=nn.functional
op=torch.ops.mkldnn._linear_pointwise
L=[]
for _ in range(30):
    L.append([torch.randn(576,576),torch.randn(192,576),torch.randn(192,576),torch.randn(576,576),torch.randn(1536,576),torch.randn(1536,576),torch.randn(576,1536)])
lm=torch.randn(49152,576)
fusedL=[[torch.cat(l[:3]),l[3],torch.cat(l[4:6]),l[6]] for l in L]
P=[[torch.ops.mkldnn._reorder_linear_weight(w,64) for w in l] for l in fusedL]
Plm=torch.ops.mkldnn._reorder_linear_weight(lm,64)
def t(fn):
    r=[]
    for _ in range(9):
        s=time.perf_counter(); fn(); r.append(time.perf_counter()-s)
    r.sort(); return r[len(r)//2]*1e3
with torch.inference_mode():
  for M in (1,2,3,4,5,6,8,12,16):
    x=torch.randn(M,576); x2=torch.randn(M,1536)
    def mkl():
        for l in L:
            for w in l: F.linear(x2 if w.shape[1]==1536 else x, w)
        F.linear(x,lm)
    def pk():
        for l in P:
            for w in l: op(x2 if w.shape[1]==1536 else x, w, None, "none", [], "")
        op(x,Plm,None,"none",[],"")
    print(M, f"mkl {t(mkl):.1f}  packed-fused {t(pk):.1f}")
