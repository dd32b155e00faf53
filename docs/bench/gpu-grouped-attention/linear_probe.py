"""What one float32 linear layer of the embedded target costs on this GPU by the rows it takes, in a CUDA
graph (50 calls captured, the median of five replays, per call): ``F.linear`` on the weight as stored
(``[out, in]``, what the model runs) against a matmul on a transposed contiguous copy (``[in, out]``),
and whether row 0 of an m-row product has the bits of the one-row product (a row-count-invariant
kernel would make verification bitwise equal to plain decoding).  From the repository root:

    python docs/bench/gpu-grouped-attention/linear_probe.py"""

import torch
import torch.nn.functional as F

SHAPES = {"q,o": (576, 576), "k,v": (576, 192), "gate,up": (576, 1536), "down": (1536, 576), "lm head": (576, 49152)}
ROWS = (1, 2, 4, 8, 16, 32, 64)
CALLS = 50


def per_call_us(fn) -> float:
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    times = []
    for _ in range(7):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) * 1e3 / CALLS)
    return sorted(times[2:])[2]


torch.manual_seed(0)
print(torch.cuda.get_device_name(), torch.__version__, "tf32:", torch.backends.cuda.matmul.allow_tf32)
for name, (k, n) in SHAPES.items():
    weight = torch.randn(n, k, device="cuda") / k**0.5
    transposed = weight.t().contiguous()
    x = torch.randn(max(ROWS), k, device="cuda")
    one = F.linear(x[:1], weight)
    for m in ROWS:
        rows = x[:m]
        a = per_call_us(lambda rows=rows, w=weight: F.linear(rows, w))
        b = per_call_us(lambda rows=rows, w=transposed: rows @ w)
        same = torch.equal(F.linear(rows, weight)[:1], one)
        print(
            f"{name:8s} [{k}->{n}] rows {m:3d}: linear {a:6.1f} us  transposed matmul {b:6.1f} us  "
            f"row 0 bits as one row: {same}",
            flush=True,
        )
