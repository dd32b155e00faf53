# One layer of talon.models.row_invariant.invariant_attention (9 query heads over 3 KV heads, head size 64,
# bfloat16 in) at 1 and 33 query rows over 128 and 300 context keys, a random tree mask; median of 300, us.
# Run from the repository root: PYTHONPATH=. python docs/bench/invariant-attention-zen4/per_layer.py
import torch, time, statistics, sys
from talon.models.row_invariant import invariant_attention

torch.set_num_threads(2)
torch.manual_seed(0)


class M:
    pass


def bench(fn, n=300):
    for _ in range(30):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


for rows, ctx in [(1, 128), (33, 128), (1, 300), (33, 300)]:
    kvl = ctx + rows
    q = torch.randn(1, 9, rows, 64).bfloat16()
    k = torch.randn(1, 3, kvl, 64).bfloat16()
    v = torch.randn(1, 3, kvl, 64).bfloat16()
    vis = torch.ones(rows, kvl, dtype=torch.bool)
    # tree mask: root + chain-ish tree: each row i sees root..i ancestors; make random tree
    par = [-1] + [int(torch.randint(0, i, (1,))) for i in range(1, rows)]
    tm = torch.zeros(rows, rows, dtype=torch.bool)
    for i in range(rows):
        j = i
        while j >= 0:
            tm[i, j] = True
            j = par[j]
    vis[:, ctx:] = tm
    mask = vis[None, None]
    print(rows, ctx, round(bench(lambda: invariant_attention(M, q, k, v, mask, scaling=0.125)), 1))
