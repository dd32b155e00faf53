"""Static-shape forwards, replayed as CUDA graphs on a GPU.

A 135M target on a GPU is bound by launching its hundreds of small kernels one by one from Python,
not by the GPU's arithmetic.
A ``StaticRunner`` runs a cache's forward at a few padded query sizes (``BUCKETS``) over a fixed-size
KV buffer, so each size can be captured once as a CUDA graph and then replayed with one launch:

* the query is padded to the next bucket ``Q`` (pad rows hold token 0 at the last position and see
  only themselves, so they stay finite and no real row ever sees them);
* attention spans the whole buffer ``[0, capacity)`` and the mask hides the rows not in use (the
  buffer starts zeroed, so hidden rows are finite and contribute exactly nothing);
* each layer writes its new rows with ``index_copy_`` at rows held in a device tensor, so the write
  position is an input of the graph, not a constant baked into it.

Every bucket that fits is captured when the runner is made, before anything else uses it (no capture
ever happens while another thread of the same run drafts).  Runners outlive runs: a finished run gives
its runners back to the model's pool (``LoadedModel.runners``) and the next run takes them, so the
capture cost (0.8 s for the embedded target on an H100) is paid once per process, like a serving
engine's start-up.

A bigger bucket is not always slower: the GEMM kernels a library picks per row count need not get
faster with fewer rows (on the H200 in float32 the embedded target's 8- and 16-row forwards took 11 ms
and its 32-row one 8.7 ms).  So after capture each graph is timed, and rows run in the cheapest
bucket at least their size (``run_as``); the cost curve, measured through the runner, then sees the
cheaper size too.  Pad rows only see themselves, so a larger bucket computes the same real rows.

``$TALON_CUDA_GRAPHS``: ``1`` (default) captures on CUDA, ``0`` turns the static path off, ``eager``
runs the same static path without capturing on any device (what the CPU tests check).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
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

    @property
    def capacity(self) -> int: ...


StaticForward = Callable[..., tuple[torch.Tensor, torch.Tensor | None]]
"""``fn(input_ids [1, Q], position_ids [1, Q], mask bool [1, 1, Q, capacity], **extra [Q, ...])`` ->
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


def cheapest_buckets(
    seconds: dict[int, float], margin: float = SWITCH_MARGIN, min_saving: float = MIN_SAVING
) -> dict[int, int]:
    """For each bucket (rows), the bucket at least as large to run it as: the cheapest one by
    ``seconds`` (a replay's time), keeping the smaller whenever a larger one is not both under
    ``margin`` x its time and ``min_saving`` seconds faster, so noise does not move rows into a bigger
    graph."""
    sizes = sorted(seconds)
    chosen = {}
    for i, size in enumerate(sizes):
        best = size
        for larger in sizes[i + 1 :]:
            if seconds[larger] < min(margin * seconds[best], seconds[best] - min_saving):
                best = larger
        chosen[size] = best
    return chosen


class StaticRunner:
    """Static inputs, outputs and (on a GPU) one CUDA graph per bucket, around one KV buffer.

    Args:
        kv: the ``KVBuffer`` (``talon.runtime.kv_cache``) the forwards write to; its capacity is fixed
            for the runner's life (it must never grow, graphs hold its address).
        extra: name -> ``(row shape, dtype)`` of each per-row input beyond ids and positions (a draft
            head's features, ``[H]``).
        capture: capture graphs (CUDA) or run the static forward eagerly (any device).
    """

    def __init__(self, kv: FixedBuffer, extra: dict[str, tuple[tuple[int, ...], torch.dtype]], capture: bool) -> None:
        self.kv, self.capture = kv, capture
        device, cap, top = kv.buffer.device, kv.capacity, BUCKETS[-1]
        self.device = device
        # Per bucket: ids, positions and the KV rows written, one contiguous [3, Q] block (one copy a call).
        self.index = {size: torch.zeros(3, size, dtype=torch.long, device=device) for size in BUCKETS}
        self.mask = torch.zeros(1, 1, top, cap, dtype=torch.bool, device=device)
        self.arange = torch.arange(top, device=device)
        self.eye = torch.eye(top, dtype=torch.bool, device=device)
        self.extra = {
            name: torch.zeros(top, *shape, dtype=dtype, device=device) for name, (shape, dtype) in extra.items()
        }
        self.graphs: dict[int, torch.cuda.CUDAGraph] = {}
        self.outputs: dict[int, tuple[torch.Tensor, torch.Tensor | None]] = {}
        self.capture_seconds = 0.0
        self.replay_seconds: dict[int, float] = {}
        """Median replay time of each captured bucket (s); empty when nothing was captured."""
        self.run_as: dict[int, int] = {}
        """Bucket -> the larger bucket its rows run in when that one is cheaper (``cheapest_buckets``)."""

    def bucket(self, length: int, q: int) -> int | None:
        """The padded size for ``q`` rows written at ``length`` (the smallest bucket holding them, or
        the cheaper larger one ``run_as`` names where it fits the buffer), or None if they take the
        eager path."""
        for size in BUCKETS:
            if size >= q:
                if length + size > self.kv.capacity:
                    return None
                cheaper = self.run_as.get(size, size)
                return cheaper if length + cheaper <= self.kv.capacity else size
        return None

    def _call(self, fn: StaticForward, size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
        index = self.index[size]
        self.kv.static_rows = index[2]
        try:
            return fn(
                index[0:1],
                index[1:2],
                self.mask[:, :, :size],
                **{name: value[:size] for name, value in self.extra.items()},
            )
        finally:
            self.kv.static_rows = None

    def capture_all(self, fn: StaticForward) -> None:
        """Capture one graph per bucket (CUDA only), from harmless inputs: each pad row at rows
        ``[0, Q)`` sees only itself.  Call before the runner is used: it overwrites rows ``[0, 128)``."""
        if not self.capture:
            return
        t0 = time.perf_counter()
        pool = torch.cuda.graph_pool_handle()
        side = torch.cuda.Stream(self.device)
        for size in BUCKETS:
            if size > self.kv.capacity:
                break
            self.mask[0, 0, :size].zero_()
            self.mask[0, 0, :size, :size] = self.eye[:size, :size]
            self.index[size][2].copy_(self.arange[:size])
            side.wait_stream(torch.cuda.current_stream(self.device))
            with torch.cuda.stream(side):
                self._call(fn, size)  # warm-up: lazy initialisation stays out of the graph
            torch.cuda.current_stream(self.device).wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph, pool=pool, capture_error_mode="thread_local"):
                self.outputs[size] = self._call(fn, size)
            self.graphs[size] = graph
        torch.cuda.synchronize(self.device)
        self._time_replays()
        self.capture_seconds = time.perf_counter() - t0

    def _time_replays(self) -> None:
        """Time every captured graph (on the capture's harmless inputs) and fill ``run_as``."""
        times: dict[int, list[float]] = {size: [] for size in self.graphs}
        for rnd in range(REPLAY_ROUNDS + 2):  # two warm-up rounds: the GPU's clocks ramp up
            for size, graph in self.graphs.items():
                t0 = time.perf_counter()
                graph.replay()
                torch.cuda.synchronize(self.device)
                if rnd >= 2:
                    times[size].append(time.perf_counter() - t0)
        self.replay_seconds = {size: sorted(t)[len(t) // 2] for size, t in times.items()}
        self.run_as = {k: v for k, v in cheapest_buckets(self.replay_seconds).items() if v != k}

    def forward(
        self,
        fn: StaticForward,
        size: int,
        length: int,
        ids: np.ndarray,
        positions: np.ndarray,
        mask: VisibleRows,
        **extra: torch.Tensor,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Run ``q = len(ids)`` rows written at ``length`` as a ``size``-row forward.

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
        q = ids.shape[0]
        index = np.empty((3, size), dtype=np.int64)
        index[0, :q], index[0, q:] = ids, 0
        index[1, :q], index[1, q:] = positions, positions[-1]
        index[2] = np.arange(length, length + size)
        copy_from_host(self.index[size], index)
        rows = np.zeros((size, self.kv.capacity), dtype=bool)
        mask.fill(rows[:q, : length + q])
        pad = np.arange(q, size)
        rows[pad, length + pad] = True  # pad rows see only themselves
        copy_from_host(self.mask[0, 0, :size], rows)
        for name, value in extra.items():
            self.extra[name][:q] = value
        if self.capture:
            self.graphs[size].replay()
            hidden, features = self.outputs[size]
        else:
            hidden, features = self._call(fn, size)
        return hidden[:q].clone(), (features[:q].clone() if features is not None else None)
