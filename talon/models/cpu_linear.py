"""Faster float32 matrix products on the CPU: linear layers whose weights are laid out once, at load
time, in oneDNN's blocked format.

``torch.nn.Linear`` on a CPU calls MKL's sgemm, which is slow for the few-row products of decoding
(one row per token, one per tree node): on the 2-core AVX-512 machine a ``[17, 576] x [576, 1536]``
product took 345 us with ``F.linear`` and 92 us with the prepacked oneDNN kernel (docs/benchmarks.md,
"CPU arithmetic").  The arithmetic stays float32; only the order of the additions inside a dot product
differs, as it does between any two BLAS kernels, and greedy losslessness is checked in that mode
like in any other (the decoding loop and ``generate()`` run the same packed model).

``$TALON_CPU_LINEAR``: ``onednn`` (default) packs every ``nn.Linear`` of a CPU model; ``plain`` keeps
PyTorch's own.  Where the oneDNN op is missing (another PyTorch build) the model is left as it is.
"""

from __future__ import annotations

import functools
import os

import torch
from torch import nn

from .loaded import ModelLoadError

CPU_LINEAR_ENV = "TALON_CPU_LINEAR"
CPU_LINEAR_MODES = ("onednn", "plain")
PACKED_DTYPES = (torch.float32, torch.bfloat16)
PACK_BATCH_HINT = 64
"""Rows the packed layout is tuned for (it serves any number; 64 was as fast as 17 or 512 here)."""


class PackedLinear(nn.Module):
    """``nn.Linear`` with its weight also held in oneDNN's blocked layout.  ``weight`` and ``bias`` stay
    the original parameters (shared, so ``state_dict``, tied embeddings and readers of ``.weight`` see
    no change); the packed copy is a plain attribute, not saved."""

    def __init__(self, linear: nn.Linear) -> None:
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight = linear.weight
        self.bias = linear.bias
        self.packed = torch.ops.mkldnn._reorder_linear_weight(linear.weight.detach(), PACK_BATCH_HINT)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., in_features]`` float32 on the CPU -> ``[..., out_features]``.  When a gradient
        is wanted (training a draft head through the target's LM head) it takes PyTorch's own linear,
        because the packed op has no backward."""
        if torch.is_grad_enabled() and (x.requires_grad or self.weight.requires_grad):
            return nn.functional.linear(x, self.weight, self.bias)
        return torch.ops.mkldnn._linear_pointwise(x, self.packed, self.bias, "none", [], "")


@functools.cache
def onednn_linear_works(dtype: torch.dtype = torch.float32) -> bool:
    """Whether this PyTorch build and this CPU have the prepacked oneDNN linear op for ``dtype`` and it
    computes ``F.linear`` (the bfloat16 path needs AVX-512 BW/VL/DQ or AVX-NE-CONVERT: an AVX2-only CPU
    has the float32 op but not the bfloat16 one)."""
    try:
        lin = nn.Linear(8, 4).to(dtype)
        x = torch.randn(3, 8, dtype=dtype)
        tol = 1e-5 if dtype == torch.float32 else 5e-2
        return torch.allclose(PackedLinear(lin)(x).float(), lin(x).float(), atol=tol)
    except (AttributeError, RuntimeError):
        return False


def cpu_linear_mode() -> str:
    """``$TALON_CPU_LINEAR`` (``onednn`` unless set to ``plain``); an unknown value raises
    ``ModelLoadError``."""
    mode = os.environ.get(CPU_LINEAR_ENV, "onednn").strip().lower() or "onednn"
    if mode not in CPU_LINEAR_MODES:
        raise ModelLoadError(f"${CPU_LINEAR_ENV}={mode!r}: choose one of {', '.join(CPU_LINEAR_MODES)}.")
    return mode


def pack_linears(module: nn.Module) -> int:
    """Replace every float32 / bfloat16 CPU ``nn.Linear`` inside ``module`` by a ``PackedLinear`` (in
    place, shared submodules once); returns how many were packed (0 when the op is unavailable)."""
    count = 0
    for parent in list(module.modules()):
        for name, child in list(parent.named_children()):
            if (
                type(child) is nn.Linear
                and child.weight.device.type == "cpu"
                and child.weight.dtype in PACKED_DTYPES
                and onednn_linear_works(child.weight.dtype)
            ):
                setattr(parent, name, PackedLinear(child))
                count += 1
    return count


def pack_for_device(module: nn.Module) -> int:
    """``pack_linears(module)`` when its weights are float32 or bfloat16 on the CPU and
    ``$TALON_CPU_LINEAR`` is ``onednn``; otherwise nothing.  Returns how many layers were packed."""
    weight = next((p for p in module.parameters()), None)
    if weight is None or weight.device.type != "cpu" or weight.dtype not in PACKED_DTYPES:
        return 0
    return pack_linears(module) if cpu_linear_mode() == "onednn" else 0


def drafter_dtype(device: torch.device, target_dtype: torch.dtype) -> torch.dtype:
    """The precision a draft head runs in: bfloat16 on a CPU whose linear layers are packed and that has
    the oneDNN bfloat16 kernels (30 % faster per head call on the AVX-512 machine), else the target's.
    Only the drafter: its rounding changes which tree is proposed, never what verification emits."""
    if (
        device.type == "cpu"
        and target_dtype == torch.float32
        and cpu_linear_mode() == "onednn"
        and onednn_linear_works(torch.bfloat16)
    ):
        return torch.bfloat16
    return target_dtype
