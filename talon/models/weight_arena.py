"""A CPU model's streamed weights in one buffer, in the order its forward reads them, on huge pages.

TALON's few-row kernel (``stream_gemm``) streams each packed weight from memory once a product, a block of
16 outputs at a time, prefetching 64 k-steps ahead along the block; at a product's last block that
prefetch runs past the weight's end.  With every weight in its own allocation it lands in memory the next
product does not read, so each product starts cold; with the weights one after another in forward order
it lands on the next product's first block.  Memory on 4 KB pages also costs the stream a page-table
walk every 4 KB, and Linux gives a region 2 MB pages only where asked (``madvise``, when
``/sys/kernel/mm/transparent_hugepage/enabled`` says ``madvise``, as on this project's VMs).  On the 2-core
Xeon of run 61 the two together made the embedded model's plain step 1-5 % faster and verifying 4 to 32
nodes 4-6 %, side by side (docs/benchmarks.md).  Only where the bytes lie changes: every product keeps its
bits.
"""

from __future__ import annotations

import ctypes
import logging
import sys

import torch
from torch import nn

from .cpu_linear import PackedLinear, PackedWeight

log = logging.getLogger(__name__)

HUGE_PAGE = 2 << 20
"""Bytes of an x86-64 Linux huge page (the buffer starts on one)."""
MADV_HUGEPAGE = 14
"""Linux's ``madvise`` advice asking for transparent huge pages."""
LINE = 64
"""Each weight starts on a cache line (a float32 weight's bytes are a multiple of 64 anyway)."""
GATHERED = "_talon_weight_arena_bytes"
"""The attribute a gathered model carries: the bytes its arena holds (for cost-curve keys and meta)."""


def streamed_weights(module: nn.Module) -> list[PackedWeight]:
    """``module``'s float32 packed weights on TALON's kernel, in the order its forward reads them: a module's
    own fused products (attributes holding a ``packed`` weight, such as ``fused_linear.FusedRows``) before
    its child layers, as ``modules()`` walks a Llama (fused q/k/v, o, fused gate/up, down, ..., LM head)."""
    found: list[PackedWeight] = []
    seen: set[int] = set()
    for m in module.modules():
        owners = [v for v in vars(m).values() if not isinstance(v, nn.Module) and hasattr(v, "packed")]
        if isinstance(m, PackedLinear):
            owners.append(m)
        for owner in owners:
            weight = owner.packed
            if isinstance(weight, PackedWeight) and weight.kernel == "stream" and weight.dtype == torch.float32:
                if id(weight) not in seen:
                    seen.add(id(weight))
                    found.append(weight)
    return found


def huge_page_buffer(count: int) -> torch.Tensor:
    """A uint8 tensor of ``count`` bytes starting on a huge-page boundary, its whole huge pages advised to be
    huge on Linux (elsewhere, or where the kernel refuses, ordinary pages: the same values)."""
    raw = torch.empty(count + HUGE_PAGE, dtype=torch.uint8)
    start = -raw.data_ptr() % HUGE_PAGE
    buffer = raw[start : start + count]
    whole = count // HUGE_PAGE * HUGE_PAGE
    if sys.platform.startswith("linux") and whole:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            libc.madvise.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int]
            if libc.madvise(buffer.data_ptr(), whole, MADV_HUGEPAGE) != 0:
                log.info("madvise(MADV_HUGEPAGE) refused (errno %d): ordinary pages", ctypes.get_errno())
        except (OSError, AttributeError) as err:  # no libc to call: ordinary pages
            log.info("no madvise here (%s): ordinary pages", err)
    return buffer


def gather_stream_weights(module: nn.Module) -> int:
    """Copy ``module``'s streamed weights (``streamed_weights``) into one ``huge_page_buffer``, one after
    another in forward order, each ``PackedWeight`` then reading its slice (the old copies are freed).
    Returns the bytes gathered (0: none on TALON's kernel); ``gathered_bytes`` tells later."""
    weights = streamed_weights(module)
    if not weights:
        return 0
    sizes = [-(-w.data.numel() * w.data.element_size() // LINE) * LINE for w in weights]
    buffer = huge_page_buffer(sum(sizes))
    offset = 0
    for weight, size in zip(weights, sizes):
        count = weight.data.numel() * weight.data.element_size()
        view = buffer[offset : offset + count].view(weight.data.dtype).view(weight.data.shape)
        view.copy_(weight.data)
        weight.data = view
        offset += size
    setattr(module, GATHERED, offset)
    return offset


def coded_weights(module: nn.Module) -> int:
    """How many of ``module``'s streamed weights (``streamed_weights``) are the codes they were dequantized
    from (``PackedWeight.codes``)."""
    return sum(weight.codes for weight in streamed_weights(module))


def gathered_bytes(module: nn.Module) -> int:
    """The bytes ``gather_stream_weights`` put in ``module``'s arena (0: not gathered)."""
    return int(getattr(module, GATHERED, 0))
