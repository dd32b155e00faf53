"""Grouped-query attention on the CPU without copying the keys and values for every query head.

transformers' ``sdpa`` attention, given a mask and more than one query row (tree verification always
passes a mask), repeats each key/value head for the query heads that share it (``repeat_kv``: one copy
of K and V per layer per forward) and runs SDPA on the copies.  PyTorch's CPU SDPA maps query heads to
key/value heads itself (``enable_gqa=True``), with a mask too, and gives bit-for-bit the output it
gives on the repeated heads (at one query row transformers folds the heads instead, ``pack_gqa``, whose
output differs from this in the last bits: greedy decoding is checked against stock ``generate()``, as
for every kernel difference).  On the 2-core AVX-512 machine a 16-node tree forward of SmolLM2-135M
(9 query heads, 3 key/value heads) spent 5.2 ms of its 60 in the copies and SDPA (profiled); without the
copies verifying 16 nodes took 57.5 ms against 60.7 (medians of 40 interleaved rounds), one row 39.4 /
40.0 ms (docs/benchmarks.md, "Cheaper verification").

Only CPU models loaded for our own loop use it (``use_gqa_attention``); the transformers peers run
transformers' own attention.  On a GPU, SDPA with a mask and ``enable_gqa`` may fall back to the math
kernel, so GPU models keep transformers' ``sdpa``.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, AttentionMaskInterface

GQA_ATTENTION = "talon_cpu_gqa_sdpa"
"""The attention implementation's registered name (``model.config._attn_implementation``)."""


def gqa_sdpa_forward(
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
    caches) go to SDPA as they are (``enable_gqa``); anything else (no grouping, no mask, a GPU,
    position biases, a paged cache, soft-capping) takes transformers' ``sdpa`` unchanged."""
    groups = getattr(module, "num_key_value_groups", 1)
    plain = (
        groups == 1
        or attention_mask is None  # causal alignment and cropping: transformers' own handling
        or query.device.type != "cpu"
        or any(kwargs.get(k) is not None for k in DELEGATED_TO_SDPA)
    )
    if plain:
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    out = torch.nn.functional.scaled_dot_product_attention(
        query, key, value, attn_mask=attention_mask, dropout_p=dropout, scale=scaling, enable_gqa=True
    )
    return out.transpose(1, 2).contiguous(), None


DELEGATED_TO_SDPA = ("position_bias", "cache", "softcap", "s_aux", "sinks")
"""Keyword arguments that ``gqa_sdpa_forward`` leaves to transformers' ``sdpa`` when given."""


def use_gqa_attention(model: nn.Module) -> bool:
    """Switch ``model`` (on the CPU, with grouped key/value heads) to ``gqa_sdpa_forward``.  Returns
    whether it did: a model on another device, without grouped heads, or whose attention is not
    transformers' ``sdpa`` is left as it is."""
    config = getattr(model, "config", None)
    weight = next((p for p in model.parameters()), None)
    if config is None or weight is None or weight.device.type != "cpu":
        return False
    heads = getattr(config, "num_attention_heads", None)
    kv_heads = getattr(config, "num_key_value_heads", None) or heads
    if not heads or kv_heads == heads or getattr(config, "_attn_implementation", None) != "sdpa":
        return False
    AttentionInterface.register(GQA_ATTENTION, gqa_sdpa_forward)
    # sdpa's masks too: an attention name without a mask function gets no mask at all from transformers
    # (generate()'s multi-token steps, e.g. prompt lookup on this model, would then attend causally from
    # the cache's start)
    AttentionMaskInterface.register(GQA_ATTENTION, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])
    model.set_attn_implementation(GQA_ATTENTION)
    return True
