"""Where models run: device and dtype choice, the one host-device synchronisation helper, the device's
display name and the CPU's identity."""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path

import numpy as np
import torch

from .loaded import LoadedModel, ModelLoadError

DTYPE_ENV = "TALON_DTYPE"
DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def pick_device() -> tuple[torch.device, torch.dtype]:
    """CUDA when a GPU is present, else CPU; float32 unless ``$TALON_DTYPE`` names ``bfloat16`` or
    ``float16``.  float32 is the default on a GPU too: a bfloat16 target rounds a 61-token tree forward
    differently from a 1-token one, and on an H100 that flipped near-tie greedy tokens (a speculative
    run then differs from plain greedy decoding); see docs/benchmarks.md."""
    name = os.environ.get(DTYPE_ENV, "float32").strip().lower() or "float32"
    if name not in DTYPES:
        raise ModelLoadError(f"${DTYPE_ENV}={name!r}: choose one of {', '.join(DTYPES)}.")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return device, DTYPES[name]


def gpu_available() -> bool:
    """Whether a CUDA device is present (no setting is read, so this never fails)."""
    return torch.cuda.is_available()


def synchronize(device: torch.device) -> None:
    """Wait for the device's queued work (CUDA); a no-op on a CPU.  Call before reading a clock."""
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def to_device(values, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
    """A tensor of the host ``values`` (a list, nested lists) on ``device``.  On a GPU the copy goes
    through pinned memory without blocking, so it is no host-device synchronisation point (a copy
    from ordinary memory would wait for the queued work)."""
    return host_to_device(torch.tensor(values, dtype=dtype), device)


def host_to_device(host: torch.Tensor | np.ndarray, device: torch.device) -> torch.Tensor:
    """``host`` (a CPU tensor or a numpy array, shared where it can be) on ``device``, copied as
    ``to_device`` copies: through pinned memory without blocking on a GPU."""
    if isinstance(host, np.ndarray):
        host = torch.from_numpy(host)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def copy_from_host(target: torch.Tensor, host: np.ndarray) -> None:
    """Copy the numpy array ``host`` into the device tensor ``target`` (same shape) without a
    host-device synchronisation point on a GPU (pinned memory, a non-blocking copy)."""
    source = torch.from_numpy(host)
    if target.device.type == "cuda":
        target.copy_(source.pin_memory(), non_blocking=True)
    else:
        target.copy_(source)


def device_label(lm: LoadedModel) -> str:
    """Where ``lm`` runs, for traces and results: ``"cpu"`` or ``"cuda (NVIDIA H100 ...)"``."""
    if lm.device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(lm.device)})"
    return lm.device.type


CPU_FLAGS = ("avx2", "avx512f", "avx512bw", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile")
"""The vector extensions that decide which CPU kernels run (and so what a step costs)."""


@functools.cache
def _cpuinfo() -> dict[str, str]:
    """The first processor's fields of ``/proc/cpuinfo`` (empty where there is none)."""
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return {}
    info: dict[str, str] = {}
    for line in text.split("\n\n", 1)[0].splitlines():
        name, _, value = line.partition(":")
        info.setdefault(name.strip(), value.strip())
    return info


def cpu_flags() -> str:
    """Which of ``CPU_FLAGS`` this CPU has, space-separated (AVX2, AVX-512, BF16, AMX)."""
    flags = set(_cpuinfo().get("flags", "").split())
    return " ".join(f for f in CPU_FLAGS if f in flags)


def cpu_name() -> str:
    """The CPU's model name (``""`` where ``/proc/cpuinfo`` is missing)."""
    return _cpuinfo().get("model name", "")


def cpu_identity() -> str:
    """What tells two CPUs' costs apart: model name, family / model numbers (a VM may only say "AMD EPYC")
    and the vector extensions, e.g. ``"AMD EPYC · family 25 model 17 · avx2 avx512f ..."``."""
    info = _cpuinfo()
    family = f"family {info['cpu family']} model {info.get('model', '?')}" if "cpu family" in info else ""
    return " · ".join(part for part in (cpu_name(), family, cpu_flags()) if part)


OPENMP_WAIT_ENV = ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")
"""How OpenMP's threads wait between parallel regions, read once when its runtime starts."""


def openmp_wait() -> str:
    """This process's OpenMP wait settings where the environment sets them (``""`` for the runtime's
    default), e.g. ``"OMP_WAIT_POLICY=PASSIVE"`` as the app sets it (``ui``).  They change what a CPU
    step costs: on the quiet AVX2 EPYC a plain step took 70 ms waiting passively and 59 ms with the
    default wait, so a cost curve measured under one prices steps run under the other 1.2-1.3x too low
    (which the app's busy notes would read as a busy machine)."""
    return ", ".join(f"{name}={os.environ[name]}" for name in OPENMP_WAIT_ENV if os.environ.get(name))


QUIET_SHARE = 0.1
"""Largest share of the machine's CPU time (all cores, over a measurement's wall clock) that other
processes and steal may take for the measurement to be kept for the machine (kernel choices, cost
curves measured again)."""


def _busy_ticks() -> tuple[int, int] | None:
    """(every core's busy ticks, steal included; this process's ticks), or None without ``/proc``."""
    try:
        fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()
        user, nice, system, _idle, _iowait, irq, softirq, steal = (int(v) for v in fields[1:9])
        own = Path("/proc/self/stat").read_text().rsplit(")", 1)[1].split()
        utime, stime = int(own[11]), int(own[12])  # fields 14 and 15 of proc(5), after the name
    except (OSError, ValueError, IndexError):
        return None
    return user + nice + system + irq + softirq + steal, utime + stime


class OtherWork:
    """Context manager: the share of the machine's CPU time (every core, over the block's wall clock)
    that other processes and steal took during the block.  ``share`` is None where ``/proc`` is missing
    or the block was too short to tell; ``quiet`` whether it is known and under ``QUIET_SHARE``."""

    def __init__(self) -> None:
        self.share: float | None = None

    def __enter__(self) -> OtherWork:
        self._start, self._t0 = _busy_ticks(), time.monotonic()
        return self

    @classmethod
    def since_now(cls) -> OtherWork:
        """One counting from now, read with ``so_far`` (for work that is not one block)."""
        return cls().__enter__()

    def __exit__(self, *exc) -> None:
        self.share = self.so_far()

    def so_far(self) -> float | None:
        """The share from the block's start until now (None: not known yet), for a report written while
        the block still runs."""
        end, seconds = _busy_ticks(), time.monotonic() - self._t0
        ticks_per_second = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        available = seconds * ticks_per_second * (os.cpu_count() or 1)
        if self._start is None or end is None or available < 50:  # under half a second of one core
            return None
        others = (end[0] - self._start[0]) - (end[1] - self._start[1])
        return max(others, 0) / available

    @property
    def quiet(self) -> bool:
        return self.share is not None and self.share < QUIET_SHARE
