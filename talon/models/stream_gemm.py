"""TALON's own float32 product for few rows on AVX-512 CPUs (``csrc/stream_gemm.cpp``), built on first
use with PyTorch's C++ extension loader and cached in its extensions folder.

MKL's and oneDNN's packed kernels read a layer's weights from memory and then multiply, one after the
other: on the 2-core AMX Xeon the model's 120 float32 products at 16 rows took 28.7 ms with MKL's
packed sgemm, about their one-row read (15-16 ms) plus their arithmetic from cache (13 ms).  This
kernel lays each weight out as column blocks of 16 outputs, streams a block once per product while
prefetching what follows, and multiplies every row of the input against it as it passes: the same
products took 15.4 / 17.0 / 18.2 / 23.8 / 32.3 ms at 2 / 4 / 8 / 16 / 32 rows against MKL's packed
18.0 / 20.6 / 24.5 / 28.7 / 36.2, and at one row 15.0 ms against PyTorch's linear's 16.4; from 64 rows
MKL's packed kernel is faster (59.8 against 51.9; docs/benchmarks.md, run 35).

Each output element is one chain of fused multiply-adds in the order of the input's columns, whatever
the row count: a row gets the same bits alone or among 64 others (tests/test_stream_gemm.py).
The arithmetic is float32 with a float32 error bound for a dot product, as any BLAS kernel's.

Needs a C++ compiler and ninja where it is first built, and an AVX-512 CPU (``torch.backends.cpu``
reports it); elsewhere ``available()`` is False and the other packed kernels serve.
"""

from __future__ import annotations

import functools
import logging
import threading
from pathlib import Path

import torch

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("csrc") / "stream_gemm.cpp"
EXTENSION_NAME = "talon_stream_gemm"
"""The built module's name in PyTorch's extensions cache (its loader rebuilds it when the source changes)."""
FLAGS = ["-O3", "-mavx512f", "-mfma", "-fopenmp"]
"""AVX-512F and FMA only (no ``-march=native``: a cached build must run on another AVX-512 machine
that shares the cache); OpenMP for ATen's ``parallel_for``, which then runs on PyTorch's own threads."""


def cpu_supports() -> bool:
    """Whether this CPU has AVX-512 as PyTorch reports it (the kernel's instructions)."""
    return "AVX512" in torch.backends.cpu.get_cpu_capability()


_BUILD_LOCK = threading.Lock()
"""Two models loading at once (two users of the app) build and import the kernel once, one after the
other."""


@functools.cache
def extension():
    """The built kernel module (``pack``, ``linear``), or None where it cannot run here: no AVX-512, or
    no compiler (the reason is logged).  Builds on first use (about 25 s on 2 cores, once per machine;
    later processes load the cached build in well under a second)."""
    with _BUILD_LOCK:
        return _build()


def _build():
    if not cpu_supports():
        return None
    from torch.utils import cpp_extension

    log.info("Loading TALON's float32 few-row kernel (built once a machine, about half a minute)...")
    try:
        return cpp_extension.load(
            EXTENSION_NAME, [str(SOURCE)], extra_cflags=FLAGS, extra_ldflags=["-fopenmp"], verbose=False
        )
    except Exception as exc:  # no compiler, no ninja, a build error: the other kernels serve
        reason = str(exc).strip().splitlines()[0][:200]
        log.warning("TALON's float32 few-row kernel is unavailable (%s); MKL's and oneDNN's serve.", reason)
        return None


def available() -> bool:
    """Whether the kernel runs here (builds it on first call)."""
    return extension() is not None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[out_features, in_features]`` float32 -> ``[ceil(out_features / 16), in_features, 16]``
    (column blocks of 16 outputs, the last padded with zeros)."""
    return extension().pack(weight.detach().contiguous())


def linear(x: torch.Tensor, packed: torch.Tensor, out_features: int, bias: torch.Tensor | None = None) -> torch.Tensor:
    """``x`` ``[..., in_features]`` float32 -> ``x @ weight.T + bias``, ``[..., out_features]``, from
    ``pack(weight)``."""
    rows = x.reshape(-1, x.shape[-1])  # any strides: the kernel copies the rows transposed
    out = extension().linear(rows, packed, out_features, bias)
    return out.reshape(*x.shape[:-1], out_features)
