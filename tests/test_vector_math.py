"""Fast tier: ``warm_vector_math`` calls every function MKL's vector math may serve, in float32 and
float64, each on fewer elements than one of ATen's VML chunks, so on the calling thread alone, before
any model computes (``talon.models.vector_math``; MKL's first-call race, PyTorch issue #188792).  The
race itself shows in a fresh process's first two-thread call about one time in two to one in ten here,
too rarely to test for in a few processes; docs/benchmarks.md gives the measurement."""

from __future__ import annotations

import pytest
import torch

from talon.models import loading, vector_math
from talon.models.loaded import ModelLoadError

VML_CHUNK = 2048
"""ATen's VML calls split a tensor over threads in chunks of this many elements."""


def test_the_warm_up_calls_each_function_in_each_precision_on_one_thread(monkeypatch):
    calls = []
    for name in vector_math.FUNCTIONS:
        real = getattr(torch, name)

        def record(x, *args, _name=name, _real=real, **kwargs):
            calls.append((_name, x.dtype, x.numel(), x.is_contiguous()))
            return _real(x, *args, **kwargs)

        monkeypatch.setattr(torch, name, record)
    vector_math._warm.cache_clear()
    try:
        vector_math.warm_vector_math()
        vector_math.warm_vector_math()  # once a process: the second call computes nothing
    finally:
        vector_math._warm.cache_clear()
        monkeypatch.undo()
        vector_math.warm_vector_math()
    assert sorted((name, str(dtype)) for name, dtype, _, _ in calls) == sorted(
        (name, str(dtype)) for name in vector_math.FUNCTIONS for dtype in (torch.float32, torch.float64)
    )
    assert all(1 < n < VML_CHUNK and contiguous for _, _, n, contiguous in calls)
    # what the forwards compute: the rotary angles' cos and sin, softmax and SiLU's exp, norms' roots
    assert {"cos", "sin", "exp", "sqrt", "rsqrt", "log", "tanh"} <= set(vector_math.FUNCTIONS)


def test_a_model_load_warms_it_before_anything_else(monkeypatch):
    order = []
    monkeypatch.setattr(loading, "warm_vector_math", lambda: order.append("warm"))
    monkeypatch.setattr(loading, "spec_problem", lambda spec: order.append("spec") or ModelLoadError("stop here"))
    with pytest.raises(ModelLoadError, match="stop here"):
        loading.load_model("anything", device=torch.device("cpu"), dtype=torch.float32)
    assert order == ["warm", "spec"]


def test_a_function_this_torch_lacks_or_refuses_is_skipped(monkeypatch):
    def refuses(x):
        raise RuntimeError("not implemented for this dtype")

    monkeypatch.setattr(vector_math, "FUNCTIONS", ("no_such_function", "erfinv", "exp"))
    monkeypatch.setattr(torch, "erfinv", refuses)
    vector_math._warm.cache_clear()
    try:
        vector_math.warm_vector_math()  # neither raises: a model load must not fail here
    finally:
        vector_math._warm.cache_clear()
        monkeypatch.undo()
        vector_math.warm_vector_math()
