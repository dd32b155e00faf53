"""One layer's attention at a tree's few query rows (the embedded model's 9 query / 3 key-value heads),
medians of 200, us.  Output (2026-11-27, twenty-eighth session):
1 128 {'sdpa_bool_gqa': 13.5, 'sdpa_float_gqa': 11.0, 'sdpa_fold_bool': 17.3, 'sdpa_fold_float': 15.3, 'explicit_fold': 18.6, 'math_gqa': 40.4}
2 128 {'sdpa_bool_gqa': 28.1, 'sdpa_float_gqa': 25.6, 'sdpa_fold_bool': 20.0, 'sdpa_fold_float': 17.7, 'explicit_fold': 21.2, 'math_gqa': 46.7}
4 128 {'sdpa_bool_gqa': 32.8, 'sdpa_float_gqa': 30.8, 'sdpa_fold_bool': 24.5, 'sdpa_fold_float': 22.1, 'explicit_fold': 25.3, 'math_gqa': 53.7}
6 128 {'sdpa_bool_gqa': 40.4, 'sdpa_float_gqa': 38.6, 'sdpa_fold_bool': 31.9, 'sdpa_fold_float': 29.2, 'explicit_fold': 32.4, 'math_gqa': 64.6}
8 128 {'sdpa_bool_gqa': 43.1, 'sdpa_float_gqa': 40.9, 'sdpa_fold_bool': 36.7, 'sdpa_fold_float': 33.8, 'explicit_fold': 36.7, 'math_gqa': 71.2}
6 300 {'sdpa_bool_gqa': 64.0, 'sdpa_float_gqa': 61.4, 'sdpa_fold_bool': 53.0, 'sdpa_fold_float': 48.3, 'explicit_fold': 53.3, 'math_gqa': 116.3}
"""
import torch, time, statistics
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


for rows, ctx in [(1, 128), (2, 128), (4, 128), (6, 128), (8, 128), (6, 300)]:
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
