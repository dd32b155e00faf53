"""A few-row float32 product in Triton, tried against cuBLAS and cuBLASLt and not kept
(docs/benchmarks.md, "A few-row Triton kernel for a tree's rows, tried").

The kernel: ``y [M, N] = x [M, K] @ w [N, K]^T`` for ``M <= 16``, one program per ``BLOCK_N`` output
columns reading its columns' weights once for all M rows, float32 multiply-adds (no tensor cores:
TF32 rounds the inputs), each output summed in one order whatever the other rows hold.  The probe
times it (four ``(BLOCK_N, BLOCK_K, warps)`` configurations) beside cuBLAS and cuBLASLt (a zero bias)
for one linear of each of the embedded target's and the shipped head's shapes, random weights, 2 to 16
rows (cuBLAS and cuBLASLt to 128), in microseconds per call in a CUDA graph of 20 calls
(``talon.models.gpu_linear.graph_seconds``), and each configuration's largest error against float64.
On a GPU with Triton, from the repository root:

    PYTHONPATH=. python docs/bench/gpu-rows-kernel/kernel_probe.py

Under ``TRITON_INTERPRET=1`` on a CPU it checks the kernel's values only (no timings)."""

import os

import torch
import triton
import triton.language as tl

from talon.models.gpu_linear import MEASURED_ROWS, graph_seconds

MAX_ROWS = 16
CONFIGS = ((8, 64, 2), (16, 64, 4), (32, 64, 4), (16, 128, 4))  # BLOCK_N, BLOCK_K, num_warps
SHAPES = {
    "q, o": (576, 576),
    "k, v": (576, 192),
    "gate, up": (576, 1536),
    "down": (1536, 576),
    "LM head": (576, 49152),
    "head fuse": (1728, 576),
    "head input": (1152, 576),
}


@triton.jit(do_not_specialize=["rows"])
def rows_product_kernel(x_ptr, w_ptr, y_ptr, rows, K, N, M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr):
    n = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    m = tl.arange(0, M)
    k = tl.arange(0, BLOCK_K)
    n_ok = n < N
    m_ok = m < rows
    acc = tl.zeros((M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + k
        k_ok = kk < K
        w = tl.load(w_ptr + n[:, None] * K + kk[None, :], mask=n_ok[:, None] & k_ok[None, :], other=0.0)
        x = tl.load(x_ptr + m[:, None] * K + kk[None, :], mask=m_ok[:, None] & k_ok[None, :], other=0.0)
        acc += tl.sum(x[:, None, :] * w[None, :, :], axis=2)
    tl.store(y_ptr + m[:, None] * N + n[None, :], acc, mask=m_ok[:, None] & n_ok[None, :])


def rows_product(x: torch.Tensor, weight: torch.Tensor, config: int) -> torch.Tensor:
    """``x`` float32 ``[rows, K]`` times contiguous ``weight`` ``[N, K]`` transposed -> ``[rows, N]``."""
    rows, inner = x.shape
    block_n, block_k, warps = CONFIGS[config]
    y = torch.empty(rows, weight.shape[0], device=x.device, dtype=torch.float32)
    grid = ((weight.shape[0] + block_n - 1) // block_n,)
    padded = max(2, 1 << (rows - 1).bit_length())  # tl.arange needs a power of two
    rows_product_kernel[grid](
        x.contiguous(),
        weight,
        y,
        rows,
        inner,
        weight.shape[0],
        M=padded,
        BLOCK_N=block_n,
        BLOCK_K=block_k,
        num_warps=warps,
    )
    return y


def errors(x: torch.Tensor, weight: torch.Tensor) -> str:
    """Each configuration's largest error against float64 over ``x``'s rows, and whether row 0 alone
    gets the bits it gets among the others."""
    exact = x.double() @ weight.double().T
    out = []
    for config in range(len(CONFIGS)):
        y = rows_product(x, weight, config)
        alone = rows_product(x[:1], weight, config)
        note = "" if torch.equal(y[:1], alone) else " (row 0 differs alone)"
        out.append(f"k{config} {(y.double() - exact).abs().max().item():.1e}{note}")
    return "; ".join(out)


torch.manual_seed(0)
if os.environ.get("TRITON_INTERPRET") == "1":
    for name, (inner, out) in SHAPES.items():
        if out < 10_000:
            print(name, errors(torch.randn(MAX_ROWS, inner), torch.randn(out, inner)))
    raise SystemExit
print(torch.cuda.get_device_name(), "triton", triton.__version__)
print("us per call: cublas / lt / k0..k3 (configs BLOCK_N, BLOCK_K, warps:", CONFIGS, ")")
for name, (inner, out) in SHAPES.items():
    weight = torch.randn(out, inner, device="cuda")
    zero = torch.zeros(out, device="cuda")
    print(f"{name} ({inner} -> {out})")
    with torch.inference_mode():
        for rows in MEASURED_ROWS:
            x = torch.randn(rows, inner, device="cuda")
            ways = {
                "cublas": lambda x=x, w=weight: torch.nn.functional.linear(x, w),
                "lt": lambda x=x, w=weight, z=zero: torch.nn.functional.linear(x, w, z),
            }
            if rows <= MAX_ROWS:
                ways |= {f"k{i}": lambda x=x, i=i, w=weight: rows_product(x, w, i) for i in range(len(CONFIGS))}
            print(f"  {rows:3d} rows: " + "  ".join(f"{w} {1e6 * graph_seconds(fn):6.1f}" for w, fn in ways.items()))
        print("  max |error| vs float64: " + errors(torch.randn(MAX_ROWS, inner, device="cuda"), weight))
