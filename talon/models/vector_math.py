"""PyTorch's float functions on MKL's vector math (VML) made safe before anything runs them on two threads.

On the CPU, ATen hands a contiguous float32 or float64 ``exp``, ``sin``, ``cos``, ``log``, ``sqrt``
and others to oneMKL's VML, each worker thread its own chunk (2,048 elements or more a chunk).  oneMKL
picks each function's kernel on that function's first call, and where the first call runs on several
threads at once one thread can run a low-accuracy kernel for its whole chunk (PyTorch issue #188792,
open; oneMKL 2024.2, the version PyTorch's wheels bundle).  Here (torch 2.13.0+cpu, two threads) the
first ``cos`` of a model's forward, the rotary embedding's angles of a 40-token prompt, got the second
thread's 20 positions wrong by up to 1.5e-4 in four of six fresh processes, and the process's first
prefill then differed from every later one: a run's first decoding could differ from the same
decoding run again.  One call of each function on fewer elements than a chunk runs on the calling thread
alone, so oneMKL settles every kernel before any model runs (on the same machine: 20 of 20 processes
then gave the same first and second ``exp`` and ``sin``, against 18 of 20 without).

``warm_vector_math`` makes those calls once a process; every model load calls it first, and the tests'
session does (their tiny models are built without a load).
"""

from __future__ import annotations

import functools
import threading

import torch

FUNCTIONS = (
    "acos",
    "asin",
    "atan",
    "cos",
    "cosh",
    "erf",
    "erfc",
    "erfinv",
    "exp",
    "expm1",
    "lgamma",
    "log",
    "log10",
    "log1p",
    "log2",
    "rsqrt",
    "sigmoid",
    "sin",
    "sinh",
    "sqrt",
    "tan",
    "tanh",
    "trunc",
)
"""Unary functions ATen may hand to VML (a superset: one call of a function VML does not serve costs
nothing)."""
DTYPES = (torch.float32, torch.float64)
"""VML's precisions: oneMKL picks a kernel per function and precision."""
ELEMENTS = 256
"""Elements of each call: fewer than one of ATen's VML chunks (2,048), so it runs on the calling thread."""

_ONE_AT_A_TIME = threading.Lock()


def warm_vector_math() -> None:
    """Call every ``FUNCTIONS`` entry once per ``DTYPES`` on the calling thread (the first call in a
    process, about a millisecond; later calls return at once; two threads loading models at once wait
    for one warm-up)."""
    with _ONE_AT_A_TIME:
        _warm()


@functools.cache
def _warm() -> None:
    with torch.inference_mode():
        for dtype in DTYPES:
            x = torch.linspace(0.125, 0.875, ELEMENTS, dtype=dtype)  # inside every function's domain
            for name in FUNCTIONS:
                function = getattr(torch, name, None)
                try:
                    if function is not None:
                        function(x)
                except RuntimeError:  # a build without this function for this dtype: nothing to settle
                    continue
