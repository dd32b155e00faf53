"""The model's first 16 products at one row, PyTorch's linear (MKL) against TALON's packed kernel, timed in turn
(fastest_each) every 4 s, eight times; run a two-thread matrix product beside it after ~14 s to see a
busy neighbour double the two-core kernel's time and barely move MKL's.  PYTHONPATH=. python docs/bench/epyc-avx2-r41/one_row_under_load.py"""
import time, torch, functools
from talon.models.registry import ModelRegistry
from talon.models.cpu_linear import PackedLinear, fastest_each
from talon.models.fused_linear import fused_products
t = ModelRegistry().get('embedded'); m = t.model
fused = fused_products(m)
own = [x for x in m.modules() if isinstance(x, PackedLinear) and x.packed is not None]
probe = [*fused[:8], *own[:8]]
inputs = [torch.randn(1, p.in_features) for p in probe]
def mkl(): return [p.plain_product(x) for p, x in zip(probe, inputs)]
def packed(): return [p.packed_product(x) for p, x in zip(probe, inputs)]
with torch.inference_mode():
    for i in range(8):
        a, b = fastest_each([mkl, packed])
        print(time.strftime('%H:%M:%S'), 'mkl/packed', round(a/b, 2), round(a*1e3,2), round(b*1e3,2), flush=True)
        time.sleep(4)
