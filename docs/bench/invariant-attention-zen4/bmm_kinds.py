# The attention's batched matmuls at the padded row counts of 1 row (16) and 33 rows (112): float32 (what the
# row-invariant path runs) against bfloat16 (which rounds its output), the chunked weighted sum, exp; us.
import torch, time, statistics

torch.manual_seed(0)


def bench(fn, n=300):
    for _ in range(30):
        fn()
    ts = []
    for _ in range(n):
        t = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e6


for th in (2, 1):
    torch.set_num_threads(th)
    for P, kv in [(16, 161), (112, 161), (16, 333), (112, 333)]:
        a = torch.randn(3, P, 64)
        b = torch.randn(3, 64, kv)
        ab = a.bfloat16()
        bb = b.bfloat16()
        w = torch.rand(3, P, kv)
        v = torch.randn(3, kv, 65)
        full = kv // 64
        wc = torch.rand(3 * full, P, 64)
        vc = torch.randn(3 * full, 64, 65)
        print(
            th,
            P,
            kv,
            "scores f32",
            round(bench(lambda: torch.bmm(a, b)), 1),
            "bf16",
            round(bench(lambda: torch.bmm(ab, bb)), 1),
            "PVchunks f32",
            round(bench(lambda: torch.bmm(wc, vc)), 1),
            "PV whole",
            round(bench(lambda: torch.bmm(w, v)), 1),
            "exp",
            round(bench(lambda: w.clone().exp_()), 1),
        )
