import time, torch
from talon.models import stream_gemm
torch.manual_seed(0)
flush = torch.ones(12 * 1024 * 1024)
def bench(fn, reps=21):
    ts = []; fn()
    for _ in range(reps):
        flush.sum(); t0 = time.perf_counter(); fn(); ts.append(time.perf_counter() - t0)
    ts.sort(); return ts[len(ts)//2]*1e3
print("shape rows: f32 stream / bf16 stream (ms, median of 21, after a 48 MB read)")
for n, k in ((16384, 576), (1536, 576), (576, 1536), (576, 576), (576, 1728)):
    w = torch.randn(n, k); p32 = stream_gemm.pack(w); p16 = stream_gemm.pack(w.to(torch.bfloat16))
    for rows in (1, 2, 3, 4, 8, 64):
        x = torch.randn(rows, k)
        a = bench(lambda: stream_gemm.linear(x, p32, n)); b = bench(lambda: stream_gemm.linear(x, p16, n))
        print(f"{n}x{k} {rows:>3}: {a:.3f} / {b:.3f}  ({b/a:.2f})")
