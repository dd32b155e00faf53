"""cuBLAS, cuBLASLt (a zero bias) and the few-row Triton kernel's configurations
(``talon.models.gpu_rows_kernel``) for one float32 linear of each of the embedded target's and the
shipped head's shapes, random weights, 2 to 16 rows: microseconds per call in a CUDA graph of 20 calls
(``gpu_linear.graph_seconds``), and each configuration's largest error against float64.  On a GPU,
from the repository root (docs/benchmarks.md, "A few-row kernel for a tree's rows"):

    PYTHONPATH=. python docs/bench/gpu-rows-kernel/kernel_probe.py"""

import torch

from talon.models import gpu_rows_kernel
from talon.models.gpu_linear import LT, RowLinear, choose_rows

SHAPES = {
    "q, o": (576, 576),
    "k, v": (576, 192),
    "gate, up": (576, 1536),
    "down": (1536, 576),
    "LM head": (576, 49152),
    "head fuse": (1728, 576),
    "head input": (1152, 576),
}
torch.manual_seed(0)
print(torch.cuda.get_device_name(), "triton", __import__("triton").__version__)
print("us per call: cublas / lt / k0..k3 (configs BLOCK_N, BLOCK_K, warps:", gpu_rows_kernel.CONFIGS, ")")
for name, (inner, out) in SHAPES.items():
    layer = RowLinear(torch.nn.Linear(inner, out, bias=False, device="cuda"))
    ways, times = choose_rows(layer, kernel=True)
    print(f"{name} ({inner} -> {out}): chosen {ways}")
    for rows, seconds in times.items():
        line = "  ".join(f"{way} {1e6 * t:6.1f}" for way, t in seconds.items())
        print(f"  {rows:3d} rows: {line}")
    x = torch.randn(gpu_rows_kernel.MAX_ROWS, inner, device="cuda")
    exact = x.double() @ layer.weight.double().T
    errors = []
    for config in range(len(gpu_rows_kernel.CONFIGS)):
        y = gpu_rows_kernel.rows_product(x, layer.weight, config)
        alone = gpu_rows_kernel.rows_product(x[:1], layer.weight, config)
        note = "" if torch.equal(y[:1], alone) else " (row 0 differs alone)"
        errors.append(f"k{config} {(y.double() - exact).abs().max().item():.1e}{note}")
    lt = torch.nn.functional.linear(x, layer.weight, layer.zero_bias)
    print(f"  max |error| vs float64: {LT} {(lt.double() - exact).abs().max().item():.1e}; " + "; ".join(errors))
