"""Does a row get the same bits at every row count of the packed float32 product?"""

import torch

torch.manual_seed(0)
for i, o in [(576, 576), (576, 1536), (1536, 576), (576, 192)]:
    w = torch.randn(o, i) * 0.02
    P = torch.ops.mkldnn._reorder_linear_weight(w, 64)
    x = torch.randn(40, i)
    f = lambda a: torch.ops.mkldnn._linear_pointwise(a, P, None, "none", [], "")
    ref = f(x[:1])
    out = []
    for m in [1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 32, 40]:
        y = f(x[:m])[0]
        out.append((m, bool(torch.equal(y, ref[0])), float((y - ref[0]).abs().max())))
    pad = torch.cat([x[:1], x.new_zeros(3, i)])
    out.append(("pad4", bool(torch.equal(f(pad)[0], f(x[:4])[0]))))
    print((i, o), out)
