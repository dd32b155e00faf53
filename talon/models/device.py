"""Where models run: device and dtype choice, the one host-device synchronisation helper, and the
device's display name."""

from __future__ import annotations

import os

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
    host = torch.tensor(values, dtype=dtype)
    if device.type != "cuda":
        return host
    return host.pin_memory().to(device, non_blocking=True)


def device_label(lm: LoadedModel) -> str:
    """Where ``lm`` runs, for traces and results: ``"cpu"`` or ``"cuda (NVIDIA H100 ...)"``."""
    if lm.device.type == "cuda":
        return f"cuda ({torch.cuda.get_device_name(lm.device)})"
    return lm.device.type
