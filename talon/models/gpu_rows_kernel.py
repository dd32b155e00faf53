"""A float32 product of a few rows on a GPU, written in Triton: ``y [M, N] = x [M, K] @ w [N, K]^T``
for ``M <= MAX_ROWS``.

A tree's verification multiplies 2 to 16 rows by each weight.  Reading the weight is all the work
there is at these sizes (the embedded target's 576 x 576 projection is 1.3 MB, under a microsecond of
an H200's memory), yet cuBLAS and cuBLASLt took 3.4-13 us a layer at 2-16 rows against 2.5-3.1 us for
cuBLAS's one-row matrix-vector kernel (docs/benchmarks.md, "cuBLASLt for a tree's few rows").  Here
one program per ``BLOCK_N`` output columns reads its columns' weights once for all M rows and sums
with float32 multiply-adds, no tensor cores (TF32 would round the inputs, and a tree's greedy verdicts
must stay those of float32).  Each output is summed in one fixed order whatever the other rows hold.

Which of ``CONFIGS`` (if any) runs for a layer shape and row count is timed at load by
``talon.models.gpu_linear``, beside cuBLAS and cuBLASLt.  Triton is imported on first use only: a
CPU install has none, and nothing here runs there (``available``), except under Triton's interpreter
(``TRITON_INTERPRET=1``) in the tests.
"""

from __future__ import annotations

import importlib.util
import os
from functools import cache

import torch

MAX_ROWS = 16
"""The most rows the kernel takes (its ``M x BLOCK_N x BLOCK_K`` products live in registers)."""
CONFIGS: tuple[tuple[int, int, int], ...] = ((8, 64, 2), (16, 64, 4), (32, 64, 4), (16, 128, 4))
"""``(BLOCK_N, BLOCK_K, num_warps)``: output columns a program computes, the slice of the inner
dimension it reads at a time, and its warps.  Timed per layer shape and row count at load."""


def interpreted() -> bool:
    """Whether Triton runs kernels in its interpreter (``TRITON_INTERPRET=1``, on CPU tensors)."""
    return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")


def available(device: torch.device) -> bool:
    """Whether the kernel can run on ``device``: Triton is installed and the device is CUDA (or the
    interpreter is on)."""
    if importlib.util.find_spec("triton") is None:
        return False
    return device.type == "cuda" or interpreted()


@cache
def _kernel(interpret: bool):
    """The compiled-on-demand Triton kernel (one per interpreter setting: the decorator reads it)."""
    import triton
    import triton.language as tl

    @triton.jit(do_not_specialize=["rows"])  # one build for every row count of a padded size
    def rows_product_kernel(
        x_ptr, w_ptr, y_ptr, rows, K, N, M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr
    ):
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

    return rows_product_kernel


def rows_product(x: torch.Tensor, weight: torch.Tensor, config: int) -> torch.Tensor:
    """``x`` float32 ``[rows, K]`` (``rows <= MAX_ROWS``) times ``weight`` float32 ``[N, K]``
    (contiguous) transposed -> ``[rows, N]``, with ``CONFIGS[config]``."""
    rows, inner = x.shape
    out_features = weight.shape[0]
    block_n, block_k, warps = CONFIGS[config]
    padded = max(2, 1 << (rows - 1).bit_length())  # tl.arange needs a power of two
    x = x.contiguous()
    y = torch.empty(rows, out_features, device=x.device, dtype=torch.float32)
    grid = ((out_features + block_n - 1) // block_n,)
    _kernel(interpreted())[grid](
        x, weight, y, rows, inner, out_features, M=padded, BLOCK_N=block_n, BLOCK_K=block_k, num_warps=warps
    )
    return y
