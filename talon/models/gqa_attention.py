"""Grouped-query attention for our KV caches' masked forwards, without copying the keys and values
for every query head.

transformers' ``sdpa`` attention, given a mask and more than one query row (tree verification always
passes a mask), repeats each key/value head for the query heads that share it (``repeat_kv``: one copy
of K and V per layer per forward) and runs SDPA on the copies.

* **CPU**: PyTorch's SDPA maps query heads to key/value heads itself (``enable_gqa=True``), with a mask
  too, and gives bit-for-bit the output it gives on the repeated heads (at one query row transformers
  folds the heads instead, ``pack_gqa``, whose output differs from this in the last bits: greedy
  decoding is checked against stock ``generate()``, as for every kernel difference).  On the 2-core
  AVX-512 machine a 16-node tree forward of SmolLM2-135M (9 query heads, 3 key/value heads) spent 5.2 ms
  of its 60 in the copies and SDPA (profiled); without the copies verifying 16 nodes took 57.5 ms
  against 60.7 (medians of 40 interleaved rounds), one row 39.4 / 40.0 ms (docs/benchmarks.md,
  "Cheaper verification").
* **CPU, float32, a step's few rows** (``few_rows_attention``): up to ``FEW_ROWS`` query rows of head
  dimension 64 on a CPU with AVX-512 take ``row_ops``' C++ grouped attention, which stacks the query heads
  sharing a key/value head and keeps a task's scores, softmax and weighted values in registers: SDPA
  gives each query head a task of its own.  On the 2-core Xeon (family 6 model 207), over 130-200 keys,
  one query row took 13-17 us against SDPA's 33-35, 16 rows 40-62 against 54-98 and 32 rows 86-132
  against 101-150 (docs/benchmarks.md, fifty-ninth session).  A row's output is the same alone as among
  a tree's rows.  ``$TALON_CPU_ATTENTION=sdpa`` (or ``$TALON_ROW_OPS=0``) keeps SDPA.
* **CUDA, float32** (``grouped_matmul_attention``): SDPA under a float32 mask runs the memory-efficient
  kernel, which gives each (query block, head) one thread block and walks the keys in it one tile after
  another: a decoding step's few query rows keep 9 of an H100's 132 multiprocessors busy, and a layer
  over 1,024 keys took 120 us (47 % of the GPU's time in a profile).  Here the query rows of the heads
  sharing a key/value head are stacked, and the scores and the weighted values are two batched matrix
  products, which the GPU spreads over the keys: a one-row step of SmolLM2-135M over 2,048 keys took
  5.0 ms on an H200 against 9.8, and plain decoding ran 11-15 % faster on an H200 and an H100
  (docs/benchmarks.md, "Grouped attention on the GPU").  ``$TALON_GPU_ATTENTION=sdpa`` keeps
  transformers' ``sdpa`` instead; half-precision models on a GPU keep it too (unmeasured here).

Only models loaded for our own loop use it (``use_gqa_attention``, draft heads through
``use_gqa_attention_in``); the transformers peers run transformers' own attention.
"""

from __future__ import annotations

import functools
import os

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

from ..config import ConfigError
from . import row_ops
from .row_ops import ROW_OPS_ENV
from .stream_gemm import instruction_set

GQA_ATTENTION = "talon_gqa"
"""The attention implementation's registered name (``config._attn_implementation``)."""
GPU_ATTENTION_ENV = "TALON_GPU_ATTENTION"
GPU_ATTENTION_MODES = ("grouped", "sdpa")
CPU_ATTENTION_ENV = "TALON_CPU_ATTENTION"
CPU_ATTENTION_MODES = ("rows", "sdpa")
FEW_ROWS = 129
"""The most query rows a forward gives ``few_rows_attention`` (a 128-node tree and its root); a prompt's
prefill keeps SDPA, which was as fast from about 100 rows and faster at 512 (a causal mask over 512 keys)."""
FEW_ROWS_HEAD_DIM = 64
"""The head dimension the C++ kernel takes (SmolLM2's, Llama 3.2 1B's, Qwen2.5 0.5B's)."""


def gpu_attention_mode() -> str:
    """``$TALON_GPU_ATTENTION``: ``grouped`` (default: ``grouped_matmul_attention`` for float32 on a
    GPU) or ``sdpa`` (transformers' own); an unknown value raises ``ConfigError`` naming the choices."""
    value = os.environ.get(GPU_ATTENTION_ENV, "grouped").strip().lower() or "grouped"
    if value not in GPU_ATTENTION_MODES:
        raise ConfigError(f"${GPU_ATTENTION_ENV}={value!r}: choose one of {', '.join(GPU_ATTENTION_MODES)}.")
    return value


def head_dim(config) -> int:
    """A transformers attention config's head width: its ``head_dim``, else hidden size over heads."""
    return getattr(config, "head_dim", None) or config.hidden_size // config.num_attention_heads


def cpu_attention_mode() -> str:
    """``$TALON_CPU_ATTENTION``: ``rows`` (default: ``few_rows_attention`` where it applies) or ``sdpa``
    (PyTorch's SDPA for every forward); an unknown value raises ``ConfigError`` naming the choices."""
    return _cpu_attention_mode(os.environ.get(CPU_ATTENTION_ENV))


@functools.cache
def _cpu_attention_mode(setting: str | None) -> str:
    value = (setting or "rows").strip().lower() or "rows"
    if value not in CPU_ATTENTION_MODES:
        raise ConfigError(f"${CPU_ATTENTION_ENV}={value!r}: choose one of {', '.join(CPU_ATTENTION_MODES)}.")
    return value


@functools.cache
def _rows_kernel(attention_setting: str | None, row_ops_setting: str | None):
    """``row_ops``' ``grouped_attention`` where the raw ``$TALON_CPU_ATTENTION`` and ``$TALON_ROW_OPS``
    allow it, the CPU runs AVX-512 (``stream_gemm.instruction_set``; on AVX2 it is unmeasured) and the
    extension builds; else None."""
    if _cpu_attention_mode(attention_setting) != "rows" or not row_ops.judge_setting(row_ops_setting):
        return None
    if instruction_set() != "AVX512" or not row_ops.available():
        return None
    return row_ops.extension().grouped_attention


def runs_few_rows_attention(model: nn.Module) -> bool:
    """Whether ``model``'s masked forwards of a few rows take ``few_rows_attention`` here (our grouped
    attention, float32 on the CPU, heads of 64, the settings on, the extension built): a cost curve's key
    names it."""
    weight = next((p for p in model.parameters()), None)
    return (
        weight is not None
        and getattr(model.config, "_attn_implementation", None) == GQA_ATTENTION
        and kernel_for(weight.device, weight.dtype) == "sdpa_gqa"
        and weight.dtype == torch.float32
        and head_dim(model.config) == FEW_ROWS_HEAD_DIM
        and _rows_kernel(os.environ.get(CPU_ATTENTION_ENV), os.environ.get(ROW_OPS_ENV)) is not None
    )


def few_rows_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scaling: float
) -> torch.Tensor | None:
    """``row_ops``' C++ grouped attention of ``query`` ``[B, heads, q, 64]`` over ``key`` / ``value``
    ``[B, kv_heads, k, 64]`` under ``mask`` ``[B or 1, 1, q, >= k]`` (additive float32, or bool with True
    = visible) -> ``[B, q, heads, 64]``, where it applies: float32 on a CPU with AVX-512, at most
    ``FEW_ROWS`` query rows, no gradient, ``$TALON_CPU_ATTENTION`` and ``$TALON_ROW_OPS`` on and the
    extension built.  None otherwise (the caller runs SDPA).  Called in every layer of every step, so the
    settings are read as raw strings and judged once."""
    kernel = _rows_kernel(os.environ.get(CPU_ATTENTION_ENV), os.environ.get(ROW_OPS_ENV))
    if (
        kernel is None
        or query.dtype != torch.float32
        or key.dtype != torch.float32
        or value.dtype != torch.float32
        or query.shape[-1] != FEW_ROWS_HEAD_DIM
        or query.shape[2] > FEW_ROWS
        or mask.dim() != 4
        or (torch.is_grad_enabled() and (query.requires_grad or key.requires_grad or value.requires_grad))
    ):
        return None
    if mask.dtype == torch.bool:
        mask = additive_mask(mask, torch.float32)
    elif mask.dtype != torch.float32:
        return None
    if query.stride(-1) != 1 or key.stride(-1) != 1 or value.stride(-1) != 1 or mask.stride(-1) != 1:
        return None
    if mask.shape[0] not in (1, query.shape[0]) or mask.shape[1] != 1 or mask.shape[2] != query.shape[2]:
        return None
    return kernel(query, key, value, mask, scaling)


def kernel_for(device: torch.device, dtype: torch.dtype) -> str | None:
    """Which grouped kernel a masked forward of a model on ``device`` in ``dtype`` takes: ``"sdpa_gqa"``
    (CPU), ``"matmul"`` (float32 on CUDA unless ``$TALON_GPU_ATTENTION=sdpa``) or None (transformers'
    ``sdpa``)."""
    if device.type == "cpu":
        return "sdpa_gqa"
    if device.type == "cuda" and dtype == torch.float32 and gpu_attention_mode() == "grouped":
        return "matmul"
    return None


def grouped_matmul_attention(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor, scaling: float
) -> torch.Tensor:
    """Attention of ``query`` ``[B, heads, q, D]`` over ``key`` / ``value`` ``[B, kv_heads, k, D]``
    (query head h reads key/value head ``h // (heads // kv_heads)``) under ``mask`` ``[B, 1, q, k]``
    (bool, True = visible, or additive float) -> ``[B, q, heads, D]``.  Every query row must see at
    least one key (a static forward's pad rows see themselves), and hidden keys must be finite (a
    hidden key's weight is exactly 0, and 0 times a finite value is 0)."""
    b, heads, q, d = query.shape
    kv_heads, keys = key.shape[1], key.shape[2]
    groups = heads // kv_heads
    stacked = query.new_empty(b, heads, q, d)  # contiguous: the group's rows stack as [groups * q, D]
    torch.mul(query, scaling, out=stacked)
    scores = torch.matmul(stacked.view(b, kv_heads, groups * q, d), key.transpose(-1, -2))
    scores = scores.view(b, kv_heads, groups, q, keys)
    if mask.dtype == torch.bool:
        scores = torch.where(mask.unsqueeze(2), scores, float("-inf"))
    else:
        scores = scores + mask.unsqueeze(2)
    weights = torch.softmax(scores, dim=-1).view(b, kv_heads, groups * q, keys)
    return torch.matmul(weights, value).view(b, heads, q, d).transpose(1, 2).contiguous()


def gqa_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``query`` ``[B, heads, q, D]``, ``key`` / ``value``
    ``[B, kv_heads, k, D]``, ``attention_mask`` bool (True = visible) or additive float ``[B, 1, q, k]``
    or None -> ``([B, q, heads, D], None)``.  Grouped heads under a mask (every forward of our KV
    caches) take ``kernel_for``'s kernel; anything else (no grouping, no mask, dropout, position
    biases, a paged cache, soft-capping) takes transformers' ``sdpa`` unchanged."""
    groups = getattr(module, "num_key_value_groups", 1)
    kernel = kernel_for(query.device, query.dtype)
    plain = (
        kernel is None
        or groups == 1
        or attention_mask is None  # causal alignment and cropping: transformers' own handling
        or dropout
        or any(kwargs.get(k) is not None for k in DELEGATED_TO_SDPA)
    )
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    scale = scaling if scaling is not None else query.shape[-1] ** -0.5
    if kernel == "matmul":
        mask = attention_mask[..., : key.shape[-2]]
        return grouped_matmul_attention(query, key, value, mask, scale), None
    out = few_rows_attention(query, key, value, attention_mask, scale)
    if out is not None:
        return out, None
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


def takes_additive_mask(model: nn.Module) -> bool:
    """Whether ``model`` runs ``gqa_attention_forward``'s CPU kernel, whose forwards can take their mask
    additive (``additive_mask``) rather than bool."""
    weight = next((p for p in model.parameters()), None)
    return (
        weight is not None
        and getattr(model.config, "_attn_implementation", None) == GQA_ATTENTION
        and kernel_for(weight.device, weight.dtype) == "sdpa_gqa"
    )


def additive_mask(mask: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """A bool attention mask (True = visible) as the additive one PyTorch's SDPA makes of it: 0 where
    visible, -inf where hidden, in ``dtype`` (the query's).  SDPA converts a bool mask in every layer:
    two operations, which an additive mask saves, 8-38 us a layer on the 2-core Xeon for 1 to 32 query
    rows over 600 keys (docs/benchmarks.md, run 54).  It adds the additive mask as it adds its own, so
    the output keeps its bits (tests/test_gqa_attention.py)."""
    return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask.logical_not(), float("-inf"))


DELEGATED_TO_SDPA = ("position_bias", "cache", "softcap", "s_aux", "sinks")
"""Keyword arguments that ``gqa_attention_forward`` leaves to transformers' ``sdpa`` when given."""


def register_attention(name: str, forward) -> None:
    """Register ``forward`` as transformers' attention implementation ``name``, with sdpa's masks: an
    attention name without a mask function gets no mask at all from transformers (generate()'s
    multi-token steps, e.g. prompt lookup on our model, would then attend causally from the cache's
    start)."""
    AttentionInterface.register(name, forward)
    AttentionMaskInterface.register(name, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def _kernel_to_switch(config, weight: torch.Tensor | None) -> str | None:
    """The grouped kernel (``kernel_for``) a model with ``config`` and weights like ``weight`` switches
    to, or None where it keeps its attention: no grouped key/value heads, an attention other than
    transformers' ``sdpa``, or no grouped kernel for its device and dtype."""
    if config is None or weight is None:
        return None
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if not heads or kv_heads == heads or getattr(config, "_attn_implementation", None) != "sdpa":
        return None
    return kernel_for(weight.device, weight.dtype)


def use_gqa_attention(model: nn.Module) -> bool:
    """Switch a transformers ``model`` to ``gqa_attention_forward``.  Returns whether it did: a model
    without grouped heads, whose attention is not transformers' ``sdpa``, or on a device and dtype
    without a grouped kernel (``kernel_for``) is left as it is."""
    if _kernel_to_switch(getattr(model, "config", None), next((p for p in model.parameters()), None)) is None:
        return False
    register_attention(GQA_ATTENTION, gqa_attention_forward)
    model.set_attn_implementation(GQA_ATTENTION)
    return True


def use_gqa_attention_in(module: nn.Module, config) -> bool:
    """The same for a module that is not a transformers model (a draft head) on a GPU: switch
    ``config``, the config its attention layers read at every forward, when ``module``'s weights take
    ``grouped_matmul_attention``.  On a CPU a head's one layer keeps transformers' ``sdpa`` (the
    shipped head's calibration was fitted with it; its share of a drafter call is small there)."""
    if _kernel_to_switch(config, next((p for p in module.parameters()), None)) != "matmul":
        return False
    register_attention(GQA_ATTENTION, gqa_attention_forward)
    config._attn_implementation = GQA_ATTENTION
    return True
