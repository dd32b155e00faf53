"""The attention of a step's query rows on the embedded model's shapes (9 query heads, 3 key/value
heads of 64, keys and values sliced from a longer cache buffer, a tree's additive mask): PyTorch's SDPA
with ``enable_gqa`` against ``row_ops``' C++ ``grouped_attention``, medians of interleaved calls, two
threads, and the largest difference between their outputs.  From the repository root:

    PYTHONPATH=. python docs/bench/xeon-emr-r59/attention_micro.py > docs/bench/xeon-emr-r59/attention_micro.txt
"""

import time

import torch

from talon.models import row_ops

torch.set_num_threads(2)
attend = row_ops.extension().grouped_attention


def median_us(fn, n):
    for _ in range(5):
        fn()
    times = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return sorted(times)[n // 2] * 1e6


print("keys  query rows  SDPA (us)  C++ (us)  SDPA / C++  largest difference")
for keys in (130, 200, 600):
    for q in (1, 2, 4, 8, 16, 32, 64, 129):
        if q >= keys:
            continue
        k, v = (torch.randn(1, 3, keys + 100, 64)[:, :, :keys] for _ in range(2))
        query = torch.randn(1, q, 9, 64).transpose(1, 2) * 3
        mask = torch.zeros(1, 1, q, keys)
        mask[..., keys - q :] = float("-inf")
        for i in range(q):  # a heap-shaped tree: each row sees itself and its parent
            mask[0, 0, i, keys - q + i] = 0
            if i:
                mask[0, 0, i, keys - q + (i - 1) // 2] = 0

        def sdpa(query=query, k=k, v=v, mask=mask):
            out = torch.nn.functional.scaled_dot_product_attention(
                query, k, v, attn_mask=mask, scale=0.125, enable_gqa=True
            )
            return out.transpose(1, 2).contiguous()

        def ours(query=query, k=k, v=v, mask=mask):
            return attend(query, k, v, mask, 0.125)

        diff = (sdpa() - ours()).abs().max().item()
        a, b = [], []
        for _ in range(5):
            a.append(median_us(sdpa, 60))
            b.append(median_us(ours, 60))
        a, b = sorted(a)[2], sorted(b)[2]
        print(f"{keys:4d}  {q:10d}  {a:9.0f}  {b:8.0f}  {a / b:10.2f}  {diff:.1e}")
