"""TALON's own float32 product for few rows on AVX-512 and AVX2 CPUs (``csrc/stream_gemm.cpp``), built
on first use with PyTorch's C++ extension loader (one build for each instruction set) and cached in its
extensions folder.

MKL's and oneDNN's packed kernels read a layer's weights from memory and then multiply, one after the
other: on the 2-core AMX Xeon the model's 120 float32 products at 16 rows took 28.7 ms with MKL's
packed sgemm, about their one-row read (15-16 ms) plus their arithmetic from cache (13 ms).  This
kernel lays each weight out as column blocks of 16 outputs, streams a block once per product while
prefetching what follows, and multiplies every row of the input against it as it passes: the same
products took 15.4 / 17.0 / 18.2 / 23.8 / 32.3 ms at 2 / 4 / 8 / 16 / 32 rows against MKL's packed
18.0 / 20.6 / 24.5 / 28.7 / 36.2, and at one row 15.0 ms against PyTorch's linear's 16.4; from 64 rows
MKL's packed kernel is faster (59.8 against 51.9; docs/benchmarks.md, run 35).  The kernel reads the input
rows where they lie: copying them transposed first, one ATen copy per product, had cost 12-17 % of the
products' time from 4 rows up (docs/benchmarks.md, run 52).  At 9 to 32 rows (two to four passes over a
group of blocks) a group goes by in chunks of 64 k-steps that stay in L1 while every pass reads them: on
a Xeon with two AVX-512 multiply-add units a core, 9-12 % less time at 9 to 16 rows (run 60).

Each output element is one chain of fused multiply-adds in the order of the input's columns, whatever
the row count: a row gets the same bits alone or among 64 others (tests/test_stream_gemm.py).
The arithmetic is float32 with a float32 error bound for a dot product, as any BLAS kernel's.  A weight
may be packed as bfloat16 instead (``pack`` of a bfloat16 tensor): it is widened to float32 as it
streams, half the bytes for the float32 kernel's bits on the rounded weight; a float32 drafter's calls
of a few rows read such copies (``cpu_linear.halve_small_rows``).

A float32 weight that was dequantized from 4- or 8-bit blocks (GGUF's Q4_1, every run of 32 inputs of an
output ``fl(fl(d * q) + m)``, codes ``q`` in 0..15: the embedded model's decoder layers; or Q8_0, ``fl(d *
q)``: its tied embedding) streams as those codes (``pack_codes``): 0.75 or 1.125 bytes a weight in place of
4, decoded a chunk at a time into the thread's cache with the file's roundings, so every product keeps the
float32 kernel's bits.  The codes are derived from the float32 values and kept only where every weight
decodes back to its bits.  A plain decoding step is memory-bound (the weights read once), so it gains
most: on the model-167 Xeon the decoder layers' products at one row took 5.2 ms against 14.1 ms
(docs/benchmarks.md, run 65).

Needs a C++ compiler and ninja where it is first built, and an AVX-512 or AVX2 CPU (as
``torch.backends.cpu`` reports it; AVX2 with FMA builds 8-lane vectors, six rows a pass); elsewhere
``available()`` is False and the other packed kernels serve.  Whether it serves a model is measured at
load against MKL's and oneDNN's kernels (``cpu_linear.choose_packed_kernel``).
"""

from __future__ import annotations

import functools
from pathlib import Path

import torch

from . import cpp_build
from .cpp_build import build_or_none

SOURCE = Path(__file__).with_name("csrc") / "stream_gemm.cpp"
BUILDS = {
    "AVX512": ("talon_stream_gemm", ["-O3", "-mavx512f", "-mfma", "-ffp-contract=off", "-fopenmp"]),
    "AVX2": ("talon_stream_gemm_avx2", ["-O3", "-mavx2", "-mfma", "-ffp-contract=off", "-fopenmp"]),
}
"""Instruction set (as ``torch.backends.cpu.get_cpu_capability()`` names it) -> the built module's
name in PyTorch's extensions cache (its loader rebuilds one when the source changes) and its compiler
flags: the instruction set and FMA only (no ``-march=native``: a cached build must run on another
machine of the kind that shares the cache); no contraction of a multiply and an add into one fused
operation (4-bit codes decode with two roundings, as the file's dequantization does; the products'
multiply-adds are fused by name); OpenMP for ATen's ``parallel_for``, which then runs on PyTorch's own
threads.  PyTorch reports AVX2 only where the CPU has FMA as well."""


def instruction_set() -> str | None:
    """The widest of ``BUILDS`` this CPU runs (``"AVX512"``, ``"AVX2"``), or None."""
    capability = torch.backends.cpu.get_cpu_capability()
    return next((name for name in BUILDS if name in capability), None)


@functools.cache
def extension():
    """The built kernel module (``pack``, ``linear``), or None where it cannot run here: neither AVX-512
    nor AVX2, or no compiler (the reason is logged).  Builds on first use (about 25 s on 2 cores, once per machine;
    later processes load the cached build in well under a second)."""
    isa = instruction_set()
    if isa is None:
        return None
    return build_or_none(
        "TALON's float32 few-row kernel", "about half a minute", "MKL's and oneDNN's serve", lambda: load_build(isa)
    )


def load_build(isa: str, build_directory: str | None = None, source: Path = SOURCE, suffix: str = ""):
    """Builds (or loads the cached build of) ``BUILDS[isa]`` and imports it; ``build_directory`` None is
    PyTorch's extensions cache.  ``source`` and ``suffix`` (appended to the module's name) build another
    revision of the kernel beside this one (a benchmark's "before").  Raises where it cannot build (no
    compiler, no ninja)."""
    from torch.utils import cpp_extension

    name, flags = BUILDS[isa]
    return cpp_extension.load(
        name + suffix, [str(source)], extra_cflags=flags, extra_ldflags=["-fopenmp"], build_directory=build_directory
    )


@functools.cache
def source_digest() -> str:
    """The kernel's identity where it runs here (its source's digest), else ``""``: a choice timed
    against another revision of the kernel is timed again."""
    if not available():
        return ""
    return cpp_build.source_digest(SOURCE)


def available() -> bool:
    """Whether the kernel runs here (builds it on first call)."""
    return extension() is not None


def pack(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` ``[out_features, in_features]`` float32 or bfloat16 -> ``[ceil(out_features / 16),
    in_features, 16]`` of its dtype (column blocks of 16 outputs, the last padded with zeros)."""
    return extension().pack(weight.detach().contiguous())


def pack_codes(weight: torch.Tensor) -> torch.Tensor | None:
    """``weight`` ``[out_features, in_features]`` float32 -> the codes it was dequantized from, uint8
    ``[ceil(out_features / 16), in_features / 32, bytes a segment]``: GGUF's Q4_1 (every run of 32 inputs of an
    output ``fl(fl(d * q) + m)``, codes ``q`` in 0..15, one scale and offset; 384 bytes a segment of 16
    outputs, 0.75 bytes a weight; the embedded model's decoder layers) or Q8_0 (``fl(d * q)``, ``q`` in
    -128..127; 576 bytes, 1.125 a weight; its tied embedding), whichever gives every weight back with its
    bits; None where neither does or ``in_features`` is not a multiple of 32.  ``linear`` of the codes gives
    the bits of ``linear`` of ``pack(weight)`` (about 0.3 s for the embedded model's weights on 2 cores)."""
    return extension().pack_codes(weight.detach().contiguous())


def linear(
    x: torch.Tensor,
    packed: torch.Tensor,
    out_features: int,
    bias: torch.Tensor | None = None,
    add: torch.Tensor | None = None,
) -> torch.Tensor:
    """``x`` ``[..., in_features]`` float32 -> ``x @ weight.T + bias``, ``[..., out_features]`` float32, from
    ``pack(weight)`` (a float32 or bfloat16 weight) or ``pack_codes(weight)``; plus ``add`` (float32, ``[...,
    out_features]``, a residual) where given, added as the outputs are stored: the bits of ``add + (x @
    weight.T + bias)``."""
    rows = x.reshape(-1, x.shape[-1])  # any strides: the kernel copies rows that are not contiguous
    addend = None if add is None else add.reshape(-1, out_features)
    out = extension().linear(rows, packed, out_features, bias, addend)
    return out.reshape(*x.shape[:-1], out_features)
