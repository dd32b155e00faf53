"""Static-shape forwards, replayed as CUDA graphs on a GPU.

A 135M target on a GPU is bound by launching its hundreds of small kernels one by one from Python,
not by the GPU's arithmetic.
A ``StaticRunner`` runs a cache's forward at a few padded query sizes (``BUCKETS``) over a fixed-size
KV buffer, so each size can be captured once as a CUDA graph and then replayed with one launch:

* the query is padded to the next bucket ``Q`` (pad rows hold token 0 at the last position and see
  only themselves, so they stay finite and no real row ever sees them);
* attention spans the buffer's first ``span`` rows, the smallest of ``SPANS`` holding the rows in use,
  and the mask hides the rows not in use (the buffer starts zeroed, so hidden rows are finite and
  contribute exactly nothing).  One graph per (bucket, span): a graph over the whole buffer made every
  forward pay attention over 1,024 rows (on the H200 in float32, 120 us a layer against 17 us over
  the ~300 rows a run had; 47 % of the GPU's time);
* each layer writes its new rows with ``index_copy_`` at rows held in a device tensor, so the write
  position is an input of the graph, not a constant baked into it.

Every (bucket, span) that fits is captured when the runner is made, before anything else uses it (no
capture ever happens while another thread of the same run drafts).  Runners outlive runs: a finished
run gives its runners back to the model's pool (``LoadedModel.runners``) and the next run takes them,
so the capture cost (4.1 s for the embedded target's 24 graphs on an H100) is paid once per process,
like a serving engine's start-up.

A bigger bucket is not always slower: the GEMM kernels a library picks per row count need not get
faster with fewer rows (on the H200 in float32 the embedded target's 8- and 16-row forwards took 11 ms
and its 32-row one 8.7 ms).  So after capture each graph is timed, and rows run in the cheapest
bucket at least their size at their span (``bucket``); the cost curve, measured through the runner,
then sees the cheaper size too.  Pad rows only see themselves, so a larger bucket computes the same real rows.

``$TALON_CUDA_GRAPHS``: ``1`` (default) captures on CUDA, ``0`` turns the static path off, ``eager``
runs the same static path without capturing on any device (what the CPU tests check).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Protocol

import numpy as np
import torch

from ..config import ConfigError
from ..models.device import copy_from_host
from .masks import VisibleRows

BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128)
"""Padded query sizes (rows fed in one forward).  A forward of more rows runs eagerly."""
CAPACITIES = (1024, 2048, 4096, 8192)
"""Buffer sizes a runner may have (rows); a run takes the smallest that holds it."""
SPANS = (256, 512, 1024, 2048, 4096, 8192)
"""Key lengths a static forward attends over (the buffer's rows from 0); a forward takes the smallest
that holds its rows, so attention reads at most twice the rows in use (and at least 256)."""
GRAPHS_ENV = "TALON_CUDA_GRAPHS"
REPLAY_ROUNDS = 9
"""Timed replays of each captured graph (interleaved across buckets; the median counts)."""
SWITCH_MARGIN = 0.95
"""A larger bucket replaces a smaller one only when it replays in under this fraction of its time..."""
MIN_SAVING = 1e-4
"""...and at least this many seconds faster: a draft head's graphs replay in a fraction of a
millisecond, where a replay's timing is mostly launch and sync noise, and a bigger bucket there saves
nothing real."""


class FixedBuffer(Protocol):
    """What a runner needs of its KV buffer (``talon.runtime.kv_cache.KVBuffer`` with ``fixed=True``)."""

    buffer: torch.Tensor  # [layers, 2, kv_heads, capacity, head_dim], zeroed, never regrown
    static_rows: torch.Tensor | None  # rows the next forward writes (set around each static call)
    static_span: int  # rows [0, static_span) its attention reads (set with static_rows)

    @property
    def capacity(self) -> int: ...


StaticForward = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
"""``fn(input_ids [1, Q], position_ids [1, Q], mask bool [1, 1, Q, span], **extra [Q, ...])`` ->
``(hidden [Q, H], features [Q, ...] or None)``, writing K/V through the buffer's ``static_rows``."""


GRAPHS_OFF = ("0", "off", "false", "no")
GRAPHS_ON = ("1", "on", "true", "yes", "")


def graphs_setting() -> str:
    """``$TALON_CUDA_GRAPHS`` as ``"on"``, ``"off"`` or ``"eager"``; an unknown value raises
    ``ConfigError`` naming the choices."""
    value = os.environ.get(GRAPHS_ENV, "1").strip().lower()
    if value == "eager":
        return "eager"
    if value in GRAPHS_OFF:
        return "off"
    if value not in GRAPHS_ON:
        raise ConfigError(f"${GRAPHS_ENV}={value!r}: use 1 (CUDA graphs on a GPU, the default), 0 (off) or eager.")
    return "on"


def static_mode(device: torch.device) -> str | None:
    """``"graph"`` (capture and replay), ``"eager"`` (static shapes, no capture) or ``None`` (off) on
    ``device``, from ``graphs_setting``."""
    setting = graphs_setting()
    if setting == "eager":
        return "eager"
    return "graph" if setting == "on" and device.type == "cuda" else None


def capacity_for(rows: int) -> int | None:
    """The smallest runner capacity holding ``rows`` rows plus the largest bucket's padding, or
    ``None`` when no runner is that big (the run then uses the eager path)."""
    for capacity in CAPACITIES:
        if rows + BUCKETS[-1] <= capacity:
            return capacity
    return None


def spans_for(capacity: int) -> tuple[int, ...]:
    """The key spans of a runner over ``capacity`` rows: every span of ``SPANS`` below it, then the
    whole buffer."""
    return tuple(span for span in SPANS if span < capacity) + (capacity,)


def cheapest_bucket(
    seconds: Sequence[tuple[int, float]], margin: float = SWITCH_MARGIN, min_saving: float = MIN_SAVING
) -> int:
    """The bucket to run rows in, from ``(bucket, replay seconds)`` of every bucket that holds them,
    smallest first: the smallest, unless a larger one is both under ``margin`` x its time and
    ``min_saving`` seconds faster (and so on up), so noise does not move rows into a bigger graph."""
    best, best_seconds = seconds[0]
    for size, t in seconds[1:]:
        if t < min(margin * best_seconds, best_seconds - min_saving):
            best, best_seconds = size, t
    return best


Bucket = tuple[int, int]
"""A static forward's shape: ``(rows, span)``, query rows padded to ``rows`` over keys ``[0, span)``."""


class StaticRunner:
    """Static inputs, outputs and (on a GPU) one CUDA graph per (bucket, span), around one KV buffer.

    Args:
        kv: the ``KVBuffer`` (``talon.runtime.kv_cache``) the forwards write to; its capacity is fixed
            for the runner's life (it must never grow, graphs hold its address).
        extra: name -> ``(row shape, dtype)`` of each per-row input beyond ids and positions (a draft
            head's features, ``[H]``).
        capture: capture graphs (CUDA) or run the static forward eagerly (any device).
    """

    def __init__(self, kv: FixedBuffer, extra: dict[str, tuple[tuple[int, ...], torch.dtype]], capture: bool) -> None:
        self.kv, self.capture = kv, capture
        device, top = kv.buffer.device, BUCKETS[-1]
        self.device = device
        self.spans = spans_for(kv.capacity)
        # Per bucket: ids, positions and the KV rows written, one contiguous [3, Q] block (one copy a call).
        self.index = {size: torch.zeros(3, size, dtype=torch.long, device=device) for size in BUCKETS}
        # Per span: the mask of every bucket's rows over the span's keys (contiguous, one copy a call).
        self.masks = {span: torch.zeros(1, 1, top, span, dtype=torch.bool, device=device) for span in self.spans}
        self.extra = {
            name: torch.zeros(top, *shape, dtype=dtype, device=device) for name, (shape, dtype) in extra.items()
        }
        self.graphs: dict[Bucket, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[Bucket, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.capture_seconds = 0.0
        self.replay_seconds: dict[Bucket, float] = {}
        """Median replay time of each captured (bucket, span) (s); empty when nothing was captured."""

    def span(self, rows: int) -> int:
        """The smallest key span holding ``rows`` rows (``rows`` <= capacity)."""
        return next(span for span in self.spans if span >= rows)

    def bucket(self, length: int, q: int) -> Bucket | None:
        """The static shape for ``q`` rows written at ``length``: the smallest bucket holding them, or
        a larger one whose graph replays clearly faster at its span (``cheapest_bucket``; only once
        graphs were timed), with the smallest span holding its rows; None if they take the eager
        path (more rows than the largest bucket, or past the buffer's end)."""
        smallest = next((size for size in BUCKETS if size >= q), None)
        if smallest is None or length + smallest > self.kv.capacity:
            return None
        sizes = [size for size in BUCKETS if size >= smallest and length + size <= self.kv.capacity]
        if not self.replay_seconds:
            return sizes[0], self.span(length + sizes[0])
        shapes = [(size, self.span(length + size)) for size in sizes]
        size = cheapest_bucket([(shape[0], self.replay_seconds[shape]) for shape in shapes])
        return size, self.span(length + size)

    def _call(self, fn: StaticForward, shape: Bucket) -> tuple[torch.Tensor, torch.Tensor | None]:
        size, span = shape
        index = self.index[size]
        self.kv.static_rows, self.kv.static_span = index[2], span
        try:
            return fn(
                index[0:1],
                index[1:2],
                self.masks[span][:, :, :size],
                **{name: value[:size] for name, value in self.extra.items()},
            )
        finally:
            self.kv.static_rows = None

    def capture_all(self, fn: StaticForward) -> None:
        """Capture one graph per bucket and span (CUDA only), from harmless inputs: each pad row at
        rows ``[0, Q)`` sees only itself.  Call before the runner is used: it overwrites rows
        ``[0, 128)``."""
        if not self.capture:
            return
        t0 = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(self.device)
        eye = torch.eye(BUCKETS[-1], dtype=torch.bool, device=self.device)
        for size in BUCKETS:
            if size > self.kv.capacity:
                break
            self.index[size][2].copy_(torch.arange(size, device=self.device))
            for span in self.spans:
                if size > span:
                    continue
                mask = self.masks[span]
                mask[0, 0, :size].zero_()
                mask[0, 0, :size, :size] = eye[:size, :size]
                side.wait_stream(torch.cuda.current_stream(self.device))
                with torch.cuda.stream(side):
                    self._call(fn, (size, span))  # warm-up: lazy initialisation stays out of the graph
                torch.cuda.current_stream(self.device).wait_stream(side)
                graph = torch.cuda.CUDAGraph()
                with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                    self.outputs[size, span] = self._call(fn, (size, span))
                self.graphs[size, span] = graph
        torch.cuda.synchronize(self.device)
        self._time_replays()
        self.capture_seconds = time.perf_counter() - t0

    def _time_replays(self) -> None:
        """Time every captured graph (on the capture's harmless inputs) into ``replay_seconds``."""
        times: dict[Bucket, list[float]] = {shape: [] for shape in self.graphs}
        for rnd in range(REPLAY_ROUNDS + 2):  # two warm-up rounds: the GPU's clocks ramp up
            for shape, graph in self.graphs.items():
                t0 = time.perf_counter()
                graph.replay()
                torch.cuda.synchronize(self.device)
                if rnd >= 2:
                    times[shape].append(time.perf_counter() - t0)
        self.replay_seconds = {shape: sorted(t)[len(t) // 2] for shape, t in times.items()}

    def forward(
        self,
        fn: StaticForward,
        shape: Bucket,
        length: int,
        ids: np.ndarray,
        positions: np.ndarray,
        mask: VisibleRows,
        **extra: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run ``q = len(ids)`` rows written at ``length`` as a forward of ``shape`` (``bucket``).

        The inputs are built on the host and reach the device in two copies (indices, mask) that do not
        wait for the device: on a GPU a draft head's call is bound by how many operations the host
        launches, not by the GPU's work.

        Args:
            ids, positions: int64 ``[q]`` (host).
            mask: what each real row sees among ``[0, length + q)``.
            extra: ``[q, ...]`` per-row inputs named as at construction (device tensors).
        Returns:
            ``(hidden [q, H], features [q, ...] or None)``, fresh tensors (not the graph's outputs).
        """
        size, span = shape
        q = ids.shape[0]
        index = np.empty((3, size), dtype=np.int64)
        index[0, :q], index[0, q:] = ids, 0
        index[1, :q], index[1, q:] = positions, positions[-1]
        index[2] = np.arange(length, length + size)
        copy_from_host(self.index[size], index)
        rows = np.zeros((size, span), dtype=bool)
        mask.fill(rows[:q, : length + q])
        pad = np.arange(q, size)
        rows[pad, length + pad] = True  # pad rows see only themselves
        copy_from_host(self.masks[span][0, 0, :size], rows)
        for name, value in extra.items():
            self.extra[name][:q] = value
        if self.capture:
            self.graphs[shape].replay()
            hidden, features = self.outputs[shape]
        else:
            hidden, features = self._call(fn, shape)
        return hidden[:q].clone(), (features[:q].clone() if features is not None else None)
