"""Few-row float32 linears on a GPU: cuBLAS or cuBLASLt, whichever this GPU runs faster, per layer
shape and row count.

PyTorch multiplies a bias-less ``nn.Linear`` with cuBLAS's ``gemm``, whose kernel choice for a few rows
can be poor: on an H200 in float32 the key/value projection of the embedded target (576 -> 192) took
53.8 us at 8 and 16 rows, where cuBLASLt took 4.7-4.8, and the 576 -> 576 projections took 9.6 us at 2,
4 and 16 rows against 3.5-5.3 (docs/benchmarks.md, "cuBLASLt for a tree's few rows").  At 32 and 64
rows cuBLAS was the faster of the two.  PyTorch takes cuBLASLt for a linear *with* a one-dimensional
bias (its ``addmm`` fuses the bias into cuBLASLt's epilogue), so a layer here passes a bias of zeros at
the row counts where that measured faster: adding 0.0 changes no value, and which library runs is
decided per call, not by a process-wide switch another user's thread would share.

The arithmetic stays float32; only the order of the additions inside a dot product differs, as it does
between any two BLAS kernels (a tree's rows already took other kernels than plain decoding's one row),
and greedy losslessness is checked in every mode.

``$TALON_GPU_LINEAR``: ``auto`` (default) times both at load, at each static bucket's row count (2 to
128), on one layer of each shape, and takes cuBLASLt where it is clearly faster; ``lt`` takes it at
every row count above one; ``cublas`` keeps PyTorch's own.  One row always keeps PyTorch's own
(cuBLAS's matrix-vector kernel, plain decoding's path).  Only float32 models on a CUDA device are
changed (``choose_for`` does the same on any device: the CPU tests run it).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable

import torch
from torch import nn

from ..config import ConfigError

GPU_LINEAR_ENV = "TALON_GPU_LINEAR"
GPU_LINEAR_MODES = ("auto", "lt", "cublas")
MEASURED_ROWS = (2, 4, 8, 16, 32, 64, 128)
"""Row counts timed in ``auto`` mode: the static runner's buckets above one row
(``talon.runtime.graphs.BUCKETS``).  A call of another count takes the choice of the next measured
count above it (cuBLAS past the last)."""
MARGIN = 0.9
"""cuBLASLt is taken at a row count only when it takes at most this fraction of cuBLAS's time."""
GRAPH_CALLS = 20
"""Calls captured in the CUDA graph whose replays time one choice (a replay's launch is then shared)."""
REPLAYS = 5


def gpu_linear_mode() -> str:
    """``$TALON_GPU_LINEAR`` (``auto`` unless set to ``lt`` or ``cublas``); an unknown value raises
    ``ConfigError`` naming the choices."""
    mode = os.environ.get(GPU_LINEAR_ENV, "auto").strip().lower() or "auto"
    if mode not in GPU_LINEAR_MODES:
        raise ConfigError(f"${GPU_LINEAR_ENV}={mode!r}: choose one of {', '.join(GPU_LINEAR_MODES)}.")
    return mode


class RowLinear(nn.Module):
    """A bias-less ``nn.Linear`` that multiplies with cuBLASLt at chosen row counts (a zero bias makes
    PyTorch's ``addmm`` take it) and as PyTorch does at the others.  ``weight`` is the original
    parameter (shared: tied embeddings and readers of ``.weight`` see no change).

    ``lt_rows``: the row counts (rows of the flattened input ``[rows, in_features]``) that take
    cuBLASLt; ``up_to``: a count between two of them takes the choice of the next one above it, up to
    ``up_to`` rows (beyond it, PyTorch's own)."""

    def __init__(self, linear: nn.Linear, lt_rows: Iterable[int] = (), up_to: int = 0) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = None
        zeros = torch.zeros(linear.out_features, device=linear.weight.device, dtype=linear.weight.dtype)
        self.register_buffer("zero_bias", zeros, persistent=False)
        self.set_choice(lt_rows, up_to)

    def set_choice(self, lt_rows: Iterable[int], up_to: int) -> None:
        """Take cuBLASLt at ``lt_rows`` (a count between two measured ones follows the next above it,
        up to ``up_to``); PyTorch's own elsewhere."""
        self.lt_rows = tuple(sorted(set(lt_rows)))
        measured = sorted(set(self.lt_rows) | {r for r in MEASURED_ROWS if r <= up_to})
        self._lt = [False] * (up_to + 1)
        for rows in range(2, up_to + 1):
            above = next((r for r in measured if r >= rows), None)
            self._lt[rows] = above in self.lt_rows

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., in_features]`` -> ``[..., out_features]``."""
        rows = x.numel() // self.in_features
        if rows < len(self._lt) and self._lt[rows]:
            # Two-dimensional, so that PyTorch's addmm (and with it cuBLASLt) takes it whatever x's strides.
            out = nn.functional.linear(x.reshape(rows, self.in_features), self.weight, self.zero_bias)
            return out.view(*x.shape[:-1], self.out_features)
        return nn.functional.linear(x, self.weight)


def row_linears(module: nn.Module) -> list[RowLinear]:
    return [m for m in module.modules() if isinstance(m, RowLinear)]


def wrap_linears(module: nn.Module) -> list[RowLinear]:
    """Replace every bias-less ``nn.Linear`` inside ``module`` by a ``RowLinear`` taking PyTorch's own
    at every row count (in place, shared submodules once); returns them all."""
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if type(child) is nn.Linear and child.bias is None:
                setattr(parent, name, RowLinear(child))
    return row_linears(module)


def graph_seconds(fn: Callable[[], object], calls: int = GRAPH_CALLS, replays: int = REPLAYS) -> float:
    """Per-call seconds of ``fn`` (CUDA work) replayed in a CUDA graph of ``calls`` calls: the median of
    ``replays`` replays after a warm-up one."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        fn()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    # Thread-local, as the static runners capture: a model loading beside another user's run on the
    # same GPU must not fail that run's CUDA calls, nor be failed by them.
    with torch.cuda.graph(graph, capture_error_mode="thread_local"):
        for _ in range(calls):
            fn()
    graph.replay()
    times = []
    for _ in range(replays):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) / 1e3 / calls)
    return sorted(times)[len(times) // 2]


def choose_rows(
    layer: RowLinear, timer: Callable[[Callable[[], object]], float] = graph_seconds
) -> tuple[tuple[int, ...], dict[int, tuple[float, float]]]:
    """The measured row counts at which cuBLASLt (a zero bias) takes at most ``MARGIN`` of cuBLAS's
    time on ``layer``'s weight, and every count's ``(cublas, lt)`` seconds."""
    times: dict[int, tuple[float, float]] = {}
    weight, zero = layer.weight, layer.zero_bias
    with torch.inference_mode():
        for rows in MEASURED_ROWS:
            x = torch.randn(rows, layer.in_features, device=weight.device, dtype=weight.dtype)
            plain = timer(lambda x=x: nn.functional.linear(x, weight))
            lt = timer(lambda x=x: nn.functional.linear(x, weight, zero))
            times[rows] = (plain, lt)
    return tuple(r for r, (plain, lt) in times.items() if lt <= MARGIN * plain), times


def use_row_linears(module: nn.Module) -> dict[tuple[int, int], tuple[int, ...]]:
    """On a CUDA device in float32, per ``$TALON_GPU_LINEAR``: wrap ``module``'s bias-less linears in
    ``RowLinear`` and choose, per layer shape ``(in, out)``, the row counts that take cuBLASLt (``auto``:
    timed on one layer of the shape, about 0.1 s a shape; ``lt``: every count above one).  Returns the
    choice per shape; empty (and ``module`` unchanged) elsewhere or with ``cublas``."""
    weight = next((p for p in module.parameters()), None)
    mode = gpu_linear_mode()
    if weight is None or weight.device.type != "cuda" or weight.dtype != torch.float32 or mode == "cublas":
        return {}
    return choose_for(module, mode)


def choose_for(
    module: nn.Module, mode: str, timer: Callable[[Callable[[], object]], float] = graph_seconds
) -> dict[tuple[int, int], tuple[int, ...]]:
    """``use_row_linears``' work on any device: ``mode`` ``"lt"`` or ``"auto"`` (timed with ``timer``)."""
    top = MEASURED_ROWS[-1]
    by_shape: dict[tuple[int, int], list[RowLinear]] = {}
    for layer in wrap_linears(module):
        by_shape.setdefault((layer.in_features, layer.out_features), []).append(layer)
    chosen: dict[tuple[int, int], tuple[int, ...]] = {}
    for shape, layers in by_shape.items():
        lt_rows = MEASURED_ROWS if mode == "lt" else choose_rows(layers[0], timer)[0]
        for layer in layers:
            layer.set_choice(lt_rows, top)
        chosen[shape] = tuple(lt_rows)
    return chosen


def lt_signature(module: nn.Module) -> str | None:
    """Which row counts take cuBLASLt, per layer shape, for cost-curve keys and benchmark meta
    (``"576x192:2,4,8,16; ..."``); None when ``module`` has no ``RowLinear``."""
    layers = row_linears(module)
    if not layers:
        return None
    shapes = {(m.in_features, m.out_features): m.lt_rows for m in layers}
    return "; ".join(f"{i}x{o}:{','.join(map(str, rows)) or '-'}" for (i, o), rows in sorted(shapes.items()))
