# Layouts of the float32 score and weighted-sum matmuls (transposed operands, per-head mm, einsum, oneDNN off).
import torch, time, statistics

torch.manual_seed(0)
torch.set_num_threads(2)


def bench(fn, n=300):
    for _ in range(30):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


for P, kv in [(16, 333), (112, 333), (112, 161)]:
    a = torch.randn(3, P, 64)
    b = torch.randn(3, 64, kv)
    bt = b.transpose(1, 2).contiguous()
    r = {}
    r["bmm a@b"] = bench(lambda: torch.bmm(a, b))
    r["bmm a@bt.T"] = bench(lambda: torch.bmm(a, bt.transpose(1, 2)))
    r["bmm (bt@a.T)"] = bench(lambda: torch.bmm(bt, a.transpose(1, 2)))
    r["3x mm"] = bench(lambda: [torch.mm(a[h], b[h]) for h in range(3)])
    r["einsum"] = bench(lambda: torch.einsum("hpd,hdk->hpk", a, b))
    with torch.backends.mkldnn.flags(enabled=False):
        r["bmm nomkldnn"] = bench(lambda: torch.bmm(a, b))
    print(P, kv, {k: round(v, 1) for k, v in r.items()})
    full = kv // 64
    w = torch.rand(3, P, kv)
    v = torch.randn(3, kv, 65)
    wc = w[:, :, : full * 64].reshape(3, P, full, 64).transpose(1, 2).reshape(3 * full, P, 64)
    vc = v[:, : full * 64].reshape(3 * full, 64, 65)
    r = {}
    r["PV chunks"] = bench(lambda: torch.bmm(wc, vc))
    vct = vc.transpose(1, 2).contiguous()
    r["PV chunks vT"] = bench(lambda: torch.bmm(vct, wc.transpose(1, 2)))
    r["PV chunk loop mm"] = bench(lambda: [torch.mm(wc[i], vc[i]) for i in range(3 * full)])
    print(P, kv, {k: round(v, 1) for k, v in r.items()})
