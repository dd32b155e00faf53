"""A Llama layer's row-wise float32 glue on the CPU in one C++ call each (``csrc/row_ops.cpp``), with
the bits of transformers' own forward: the RMS norm (``LlamaRMSNorm``), the rotary embedding of a
fused attention's query and key heads (``fused_linear.rotate_queries_and_keys``) and, where PyTorch's
AVX-512 kernels run and its SLEEF exponential can be called, a fused MLP's ``silu(gate) * up``
(``silu_times_up``, compared bit for bit with PyTorch's at load).  The same module holds
the rows' picks (``row_top``) and the grouped attention of a step's few query rows
(``gqa_attention.few_rows_attention``).

On the 2-core AVX2 EPYC a plain step of the embedded SmolLM2-135M took about 62 ms, of which the products
took 32: most of the rest was PyTorch dispatching small operations one by one, a few microseconds each
(a norm is eight of them, 60-130 us; 61 norms a step).  Each C++ loop performs the same IEEE float32
operations in the same order, each rounded (no fused multiply-add), and the norm's one reduction is
PyTorch's own sum, so every element keeps its bits (tests/test_row_ops.py compares them with
transformers' forward): a norm took 9 us against 68, the rotary embedding 3 us against 68, and side by
side plain decoding ran 1.091x and TALON auto 1.080x as fast with the same tokens (docs/benchmarks.md,
run 40).

Built on first use with PyTorch's C++ extension loader, for any CPU (no instruction-set flags: the
element loops are built for AVX-512, AVX2 and the baseline and picked as the module loads), and cached
in its extensions folder; where it cannot be built (no compiler) the layers keep transformers' forward.
``$TALON_ROW_OPS=0`` keeps it too (a benchmark's "before"), and PyTorch's argmax and SDPA.  Only models
loaded for our own loop use it (``use_row_ops``); the transformers peers run the model as transformers
builds it.
"""

from __future__ import annotations

import functools
import os
import types
from pathlib import Path

import torch
from torch import nn
from transformers.activations import SiLUActivation
from transformers.models.llama.modeling_llama import LlamaAttention, LlamaMLP, LlamaRMSNorm

from ..config import ConfigError
from . import cpp_build, fused_linear
from .cpp_build import build_or_none
from .fused_linear import FusedRows

SOURCE = Path(__file__).with_name("csrc") / "row_ops.cpp"
NAME = "talon_row_ops"
FLAGS = ["-O3", "-ffp-contract=off", "-fopenmp"]
"""No fused multiply-add (``-ffp-contract=off``) and no fast-math: each operation rounds as PyTorch's
does.  OpenMP for ATen's ``parallel_for`` (a prompt's rows)."""
ROW_OPS_ENV = "TALON_ROW_OPS"


def row_ops_setting() -> bool:
    """``$TALON_ROW_OPS``: on (``1``, the default) or off (``0``); another value raises ``ConfigError``."""
    return judge_setting(os.environ.get(ROW_OPS_ENV))


@functools.cache
def judge_setting(setting: str | None) -> bool:
    """``row_ops_setting`` of the raw value ``setting`` (None: unset), judged once per value (the
    attention reads it in every layer)."""
    value = (setting or "1").strip().lower() or "1"
    if value not in ("0", "1", "on", "off"):
        raise ConfigError(
            f"${ROW_OPS_ENV}={value!r}: use 1 (the C++ norm, rotary embedding, picks and attention; the default) or 0."
        )
    return value in ("1", "on")


@functools.cache
def extension():
    """The built module (``rms_norm``, ``rotary``; ``row_argmax`` and ``row_topk`` for ``row_top``;
    ``grouped_attention`` for ``gqa_attention``), or None where it cannot be built here (the reason is
    logged).  Builds on first use (about 45 s on the 2-core AVX2 EPYC, once per machine)."""
    from torch.utils import cpp_extension

    return build_or_none(
        "TALON's C++ norm, rotary embedding, row picks and attention",
        "under a minute",
        "transformers' forward, PyTorch's argmax and SDPA serve",
        lambda: cpp_extension.load(NAME, [str(SOURCE)], extra_cflags=FLAGS, extra_ldflags=["-fopenmp"]),
    )


def available() -> bool:
    """Whether the extension runs here (builds it on first call)."""
    return extension() is not None


@functools.cache
def source_digest() -> str:
    """The extension's revision where it runs here (its source's digest), else ``""``: a cost curve
    measured with another revision (another norm, another argmax) is measured again."""
    return cpp_build.source_digest(SOURCE) if available() else ""


def _needs_grad(*tensors: torch.Tensor) -> bool:
    return torch.is_grad_enabled() and any(t.requires_grad for t in tensors)


def _norm_forward(self: LlamaRMSNorm, hidden_states: torch.Tensor) -> torch.Tensor:
    """``LlamaRMSNorm.forward`` in one call for float32 on the CPU without gradients; else the class's own."""
    x, weight = hidden_states, self.weight
    if x.dtype != torch.float32 or weight.dtype != torch.float32 or x.device.type != "cpu" or _needs_grad(x, weight):
        return type(self).forward(self, x)
    return extension().rms_norm(x, weight, self.variance_epsilon)


def rotate_queries_and_keys(
    heads_rows: torch.Tensor, query_heads: int, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``fused_linear.rotate_queries_and_keys`` (same shapes, same bits) in one call where the extension
    takes the tensors: float32 on the CPU, each row's heads packed (``heads_rows`` ``[B, rows, heads, D]``
    with strides ``(.., .., D, 1)``, D even), ``cos`` / ``sin`` ``[B or 1, rows, D]``, no gradient; else
    that function."""
    x = heads_rows
    if (
        x.dtype != torch.float32
        or x.device.type != "cpu"
        or x.dim() != 4
        or x.stride(-1) != 1
        or x.stride(-2) != x.shape[-1]
        or x.shape[-1] % 2
        or cos.dtype != torch.float32
        or sin.dtype != torch.float32
        or cos.shape != sin.shape
        or cos.shape[1:] != (x.shape[1], x.shape[-1])
        or cos.shape[0] not in (1, x.shape[0])
        or _needs_grad(x, cos, sin)
    ):
        return fused_linear.rotate_queries_and_keys(x, query_heads, cos, sin)
    rotated = extension().rotary(x, cos, sin)
    return rotated[..., :query_heads, :].transpose(1, 2), rotated[..., query_heads:, :].transpose(1, 2)


def silu_times_up(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """``silu(gate) * up`` (``[..., n]`` each, one shape) in one C++ call where the extension takes the
    tensors (float32 on the CPU, no gradient), with the bits of PyTorch's two operations; else those."""
    if (
        gate.dtype != torch.float32
        or up.dtype != torch.float32
        or gate.device.type != "cpu"
        or gate.shape != up.shape
        or _needs_grad(gate, up)
    ):
        return nn.functional.silu(gate) * up
    return extension().silu_mul(gate, up)


SILU_PROBE_ROWS = (1, 5, 32)
"""Row counts at which the C++ ``silu(gate) * up`` is compared with PyTorch's at a model's width."""


@functools.cache
def silu_mul_matches(width: int) -> bool:
    """Whether the extension's ``silu_mul`` runs here and gives PyTorch's bits for ``silu(gate) * up`` at
    ``width`` (rows of random values over a wide range of magnitudes, infinities and zeros among them, as
    strided views of a wider tensor, as the MLP's fused product gives them).  Checked once a process per
    width: a PyTorch whose silu computes otherwise keeps its own operations."""
    if not available() or not extension().silu_mul_available():
        return False
    generator = torch.Generator().manual_seed(0)
    for rows in SILU_PROBE_ROWS:
        both = torch.randn(rows, 2 * width, generator=generator)
        both *= 10.0 ** torch.randint(-3, 3, both.shape, generator=generator)
        both[0, : min(6, width)] = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 90.0, -105.0])[: min(6, width)]
        gate, up = both.split(width, dim=-1)
        with torch.inference_mode():
            expected, got = nn.functional.silu(gate) * up, extension().silu_mul(gate, up)
        if not torch.equal(expected.view(torch.int32), got.view(torch.int32)):
            return False
    return True


def _plain_silu(act: nn.Module) -> bool:
    """Whether ``act`` is a SiLU module whose forward is ``nn.functional.silu`` (PyTorch's or
    transformers' class, forward not replaced)."""
    return type(act) in (nn.SiLU, SiLUActivation) and "forward" not in vars(act)


def use_row_ops(model: nn.Module) -> int:
    """Give ``model``'s float32 CPU norms (``LlamaRMSNorm`` and subclasses that keep its forward), fused
    attentions and fused SiLU MLPs (``fused_linear``; the MLPs where ``silu_mul_matches``) the C++ forms,
    where ``$TALON_ROW_OPS`` allows and the extension builds.
    Returns how many modules changed (0: none; ``uses_row_ops`` tells later)."""
    weight = next((p for p in model.parameters()), None)
    if weight is None or weight.device.type != "cpu" or weight.dtype != torch.float32 or not row_ops_setting():
        return 0
    norms = [
        m
        for m in model.modules()
        if isinstance(m, LlamaRMSNorm) and type(m).forward is LlamaRMSNorm.forward and "forward" not in vars(m)
    ]
    attentions = [
        m
        for m in model.modules()
        if isinstance(m, LlamaAttention)
        and isinstance(vars(m).get("fused_qkv"), FusedRows)
        and "rotate_queries_and_keys" not in vars(m)
    ]
    mlps = [
        m
        for m in model.modules()
        if isinstance(m, LlamaMLP)
        and isinstance(vars(m).get("fused_gate_up"), FusedRows)
        and _plain_silu(m.act_fn)
        and "act_times_up" not in vars(m)
    ]
    if not (norms or attentions or mlps) or not available():
        return 0
    mlps = [m for m in mlps if silu_mul_matches(m.fused_gate_up.sizes[0])]
    for norm in norms:
        norm.forward = types.MethodType(_norm_forward, norm)
    for attention in attentions:
        attention.rotate_queries_and_keys = rotate_queries_and_keys
    for mlp in mlps:
        mlp.act_times_up = silu_times_up
    return len(norms) + len(attentions) + len(mlps)


def uses_row_ops(model: nn.Module) -> bool:
    """Whether ``use_row_ops`` changed any module of ``model`` (for cost-curve keys and results' meta)."""
    return any(
        getattr(vars(m).get("forward"), "__func__", None) is _norm_forward
        or vars(m).get("rotate_queries_and_keys") is rotate_queries_and_keys
        or vars(m).get("act_times_up") is silu_times_up
        for m in model.modules()
    )
