"""Checks of the few-row Triton kernel (``talon.models.gpu_rows_kernel``) that run in Triton's
interpreter on CPU tensors, in a process started with ``TRITON_INTERPRET=1``
(``tests/test_gpu_linear.py`` starts it)."""

from __future__ import annotations

import torch

from talon.models import gpu_linear, gpu_rows_kernel
from talon.runtime import graphs
from tests.test_tiny_engine import assert_head_method_equals_plain
from tests.tiny import random_head, tiny_target


def products_are_float32_and_row_alone() -> None:
    """Every configuration, 1 to 16 rows, three shapes: within 1e-4 of float64, and row 0 the same bits
    alone as among other rows."""
    assert gpu_rows_kernel.interpreted() and gpu_rows_kernel.available(torch.device("cpu"))
    for config in range(len(gpu_rows_kernel.CONFIGS)):
        torch.manual_seed(config)
        for inner, out in ((64, 40), (576, 192), (100, 70)):
            w = torch.randn(out, inner)
            x = torch.randn(gpu_rows_kernel.MAX_ROWS, inner)
            first = gpu_rows_kernel.rows_product(x[:1], w, config)
            for rows in (1, 2, 3, 8, 16):
                y = gpu_rows_kernel.rows_product(x[:rows], w, config)
                torch.testing.assert_close(y.double(), x[:rows].double() @ w.double().T, rtol=0, atol=1e-4)
                assert torch.equal(y[:1], first), (config, inner, rows)


def method_equals_plain(method: str) -> None:
    """Every bias-less linear of the target and the head takes the kernel at every count from 2 to 16
    rows (on static runners, eagerly): greedy output equals plain decoding, which equals ``generate()``."""
    import os

    os.environ[graphs.GRAPHS_ENV] = "eager"
    target = tiny_target()
    head = random_head(target)
    for module, config in ((target.model, 1), (head, 3)):
        for layer in gpu_linear.wrap_linears(module):
            layer.set_choice(dict.fromkeys((2, 4, 8, 16), f"k{config}"), 16)
    assert "64x64:2@k1,4@k1,8@k1,16@k1" in gpu_linear.lt_signature(target.model)
    calls = []
    product = gpu_rows_kernel.rows_product

    def counted(x, w, config):
        calls.append(x.shape[0])
        return product(x, w, config)

    gpu_rows_kernel.rows_product = counted
    assert_head_method_equals_plain(target, head, method)
    assert calls and set(calls) <= set(range(2, 17)), sorted(set(calls))
