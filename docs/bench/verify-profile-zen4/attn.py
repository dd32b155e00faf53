import statistics
import sys
import time

import torch
import torch.nn.functional as F

torch.set_num_threads(2)
torch.manual_seed(0)


def bench(fn, n=200):
    for _ in range(20):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


# Shapes as ROWS:CONTEXT pairs, comma-separated (default: those of results.txt, section 3).
SHAPES = sys.argv[1] if len(sys.argv) > 1 else "1:128,16:128,32:128,32:300,64:128"
for rows, ctx in [tuple(map(int, pair.split(":"))) for pair in SHAPES.split(",")]:
    k_len = ctx + rows
    q = torch.randn(1, 9, rows, 64)
    k = torch.randn(1, 3, k_len, 64)
    v = torch.randn(1, 3, k_len, 64)
    mask = torch.ones(rows, k_len, dtype=torch.bool).tril(ctx)
    mb = mask[None, None]
    mf = torch.zeros(1, 1, rows, k_len).masked_fill(~mb, float("-inf"))
    res = {}
    res["sdpa_bool_gqa"] = bench(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mb, enable_gqa=True))
    res["sdpa_float_gqa"] = bench(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mf, enable_gqa=True))
    qf = q.reshape(1, 3, 3 * rows, 64)
    mbf = mb.expand(1, 1, rows, k_len).repeat(1, 1, 3, 1) if False else mb.repeat(1, 1, 3, 1)
    mff = mf.repeat(1, 1, 3, 1)
    res["sdpa_fold_bool"] = bench(lambda: F.scaled_dot_product_attention(qf, k, v, attn_mask=mbf))
    res["sdpa_fold_float"] = bench(lambda: F.scaled_dot_product_attention(qf, k, v, attn_mask=mff))
    scale = 64**-0.5

    def explicit():
        s = torch.matmul(qf, k.transpose(-1, -2)).mul_(scale).add_(mff)
        return torch.matmul(s.softmax(-1), v)

    res["explicit_fold"] = bench(explicit)
    with torch.nn.attention.sdpa_kernel(torch.nn.attention.SDPBackend.MATH):
        res["math_gqa"] = bench(lambda: F.scaled_dot_product_attention(q, k, v, attn_mask=mb, enable_gqa=True))
    print(rows, ctx, {a: round(b, 1) for a, b in res.items()})
