"""One packed product where a decoder layer multiplies one input by several weights: a Llama attention's
query, key and value projections, its MLP's gate and up projections (float32 and bfloat16 CPU models
whose linears ``cpu_linear`` packed; in bfloat16 the row-invariant forward then sets the fused products'
row rules as it sets the linears', ``talon.models.row_invariant``).

A layer of the embedded SmolLM2-135M makes seven products a token, four with these fusions; the key and
value projections are only 192 wide, where the packed kernel is least efficient, and every product pays
its call.  On the 2-core Zen 4, side by side over the headline's prompts (docs/benchmarks.md, run 30),
plain decoding ran 1.107x as fast with them and TALON auto 1.078x, every run equal.

The fused weight is the parts' weights stacked by rows, and an output element is the same dot product
whichever weight rows are stacked beside its own, so oneDNN gives every output the bits the separate
products gave: checked at load on random rows for each fused product, and where a build computes them
otherwise the layer keeps its separate products.  The parts' own packed copies are dropped (the memory
stays the same); they keep their ``weight`` and ``bias`` (``state_dict``, checksums and training read
those) and still answer a direct call, through PyTorch's own linear.

Only classes whose forward is transformers' Llama forward take it (``LlamaAttention``, ``LlamaMLP``
and their subclasses that keep it): the fused forward is that forward with one product in place of
the parts', and in the attention the rotary embedding applied to the query and key heads in one pass
over that product's output (``rotate_queries_and_keys``: the same bits, 1-2 % of a forward more).
A ``LlamaDecoderLayer`` whose attention and MLP both took the fused forwards then hands each residual
to the product that ends its branch (``hand_residuals``: ``PackedLinear.plus``, which TALON's kernel
adds as it stores its outputs; the same bits, since ``residual + output`` is one IEEE addition either
way): at 32 rows the separate addition had read outputs the product's threads had just left in their
own caches, 0.7 ms of a verification (docs/benchmarks.md, run 64).
Read-only after loading, like the rest of a loaded model.
"""

from __future__ import annotations

import types
from collections.abc import Sequence

import torch
from torch import nn
from transformers.models.llama.modeling_llama import (
    ALL_ATTENTION_FUNCTIONS,
    LlamaAttention,
    LlamaDecoderLayer,
    LlamaMLP,
    eager_attention_forward,
    rotate_half,
)

from .cpu_linear import PackedLinear, PackedWeight, mkl_packs_any_rows, product_in_rows, streams_float32

PROBE_ROWS = (1, 5)
"""Row counts at which a fused product is checked against its parts at load (bit for bit)."""


class FusedRows:
    """Several ``PackedLinear`` parts that read the same input, as one packed product of their stacked
    weights (``[sum of out_features, in_features]``).  Not an ``nn.Module``: its packed weight is no
    parameter, so ``state_dict`` and the target's checksum do not change."""

    def __init__(self, parts: Sequence[PackedLinear]) -> None:
        self.parts = tuple(parts)
        self.sizes = [p.out_features for p in parts]
        self.in_features = parts[0].in_features
        weight = torch.cat([p.weight.detach() for p in parts])
        biases = [p.bias for p in parts]
        self.bias = torch.cat([b.detach() for b in biases]) if biases[0] is not None else None
        kernel = parts[0].packed.kernel
        if kernel == "mkl" and not mkl_packs_any_rows(*weight.shape):
            kernel = "onednn"  # then the parts' bits differ and ``same_bits`` keeps them apart
        self.packed = PackedWeight(weight, kernel)
        """The stacked weight laid out for the parts' packed kernel."""
        self.out_features = sum(self.sizes)
        self.plain_rows = parts[0].plain_rows
        self.min_rows = 0
        """Row rules of the row-invariant bfloat16 forward (``PackedLinear.min_rows``, ``block_rows``,
        ``call_rows``)."""
        self.block_rows = 0
        self.call_rows = 0
        self.half: PackedWeight | None = None
        """A bfloat16 copy of the stacked weight for TALON's kernel (``halve``: a float32 drafter's calls of a
        few rows read half the bytes)."""
        self.half_rows = 0
        """Inputs of at most this many rows take ``half``."""

    def halve(self, rows: int) -> None:
        """Give the product a bfloat16 copy for inputs of at most ``rows`` rows where it streams float32
        weights on TALON's kernel (``cpu_linear.halve_small_rows``: drafters only)."""
        if rows and streams_float32(self.packed):
            self.half = PackedWeight(torch.cat([p.weight.detach() for p in self.parts]).to(torch.bfloat16), "stream")
            self.half_rows = rows

    def separate(self, x: torch.Tensor) -> list[torch.Tensor]:
        """Each part's product of ``x``, one call each."""
        return [part(x) for part in self.parts]

    def plain_product(self, x: torch.Tensor) -> torch.Tensor:
        """What the forward runs at ``plain_rows`` rows or fewer: the parts' own products (PyTorch's linear,
        their packed copies dropped), side by side."""
        return torch.cat(self.separate(x), dim=-1)

    def product(self, x: torch.Tensor) -> torch.Tensor:
        """``x`` ``[..., in_features]`` -> the parts' products side by side, ``[..., sum of out_features]``: one
        fused product, or where a part would take another kernel (a gradient wanted, or MKL at this few
        rows) the parts' own, concatenated."""
        grad = torch.is_grad_enabled() and (x.requires_grad or any(p.weight.requires_grad for p in self.parts))
        if grad:
            return self.plain_product(x)
        if x.numel() <= self.half_rows * self.in_features:  # (as ``PackedLinear`` takes its ``half`` first)
            return self.half(x, self.bias)
        if x.numel() <= self.plain_rows * self.in_features:
            return self.plain_product(x)
        return product_in_rows(self.packed_product, x, self)

    def packed_product(self, x: torch.Tensor) -> torch.Tensor:
        """The one packed product of ``x`` with the stacked weights, ``[..., sum of out_features]``."""
        return self.packed(x, self.bias)

    def __call__(self, x: torch.Tensor) -> list[torch.Tensor]:
        """``product(x)`` as one ``[..., out_features]`` view per part, in order."""
        return list(self.product(x).split(self.sizes, dim=-1))

    def same_bits(self) -> bool:
        """Whether the fused product gives the parts' packed products' bits at ``PROBE_ROWS`` rows of random
        input (while the parts still hold their packed copies).  Packed against packed: where MKL serves
        a few rows (``plain_rows``) the fused forward hands those rows to the parts anyway."""
        with torch.inference_mode():
            for rows in PROBE_ROWS:
                x = torch.randn(rows, self.in_features, dtype=self.packed.dtype)
                if not torch.equal(
                    self.packed_product(x), torch.cat([p.packed_product(x) for p in self.parts], dim=-1)
                ):
                    return False
        return True


def _fused_attention_forward(
    self: LlamaAttention,
    hidden_states: torch.Tensor,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    attention_mask: torch.Tensor | None = None,
    past_key_values=None,
    residual: torch.Tensor | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``LlamaAttention.forward`` with the query, key and value from one product (``fused_qkv``), and the
    rotary embedding applied to the query and key heads in one pass (``rotate_queries_and_keys``, or the
    one-call C++ form ``talon.models.row_ops`` sets on the module).  ``residual`` given (the decoder
    layer's, ``_residual_layer_forward``): returns ``residual`` plus the output (``PackedLinear.plus``)."""
    input_shape = hidden_states.shape[:-1]
    hidden_shape = (*input_shape, -1, self.head_dim)
    queries, keys, _ = self.fused_qkv.sizes
    out = self.fused_qkv.product(hidden_states)
    rotate = vars(self).get("rotate_queries_and_keys", rotate_queries_and_keys)
    query, key = rotate(out[..., : queries + keys].view(hidden_shape), queries // self.head_dim, *position_embeddings)
    value = out[..., queries + keys :].view(hidden_shape).transpose(1, 2)
    if past_key_values is not None:
        key, value = past_key_values.update(key, value, self.layer_idx)
    attention = ALL_ATTENTION_FUNCTIONS.get_interface(self.config._attn_implementation, eager_attention_forward)
    out, weights = attention(
        self,
        query,
        key,
        value,
        attention_mask,
        dropout=0.0 if not self.training else self.attention_dropout,
        scaling=self.scaling,
        **kwargs,
    )
    out = out.reshape(*input_shape, -1).contiguous()
    return (self.o_proj(out) if residual is None else self.o_proj.plus(out, residual)), weights


def rotate_queries_and_keys(
    heads_rows: torch.Tensor, query_heads: int, cos: torch.Tensor, sin: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """``apply_rotary_pos_emb`` over the query and key heads at once: ``heads_rows`` ``[B, rows, heads +
    kv_heads, D]`` (the query heads first), ``cos`` / ``sin`` ``[B, rows, D]`` -> query ``[B, heads, rows,
    D]`` and key ``[B, kv_heads, rows, D]``.  The same arithmetic element by element (``x * cos +
    rotate_half(x) * sin``), so the same bits, in half the operations."""
    cos, sin = cos.unsqueeze(2), sin.unsqueeze(2)  # over the heads, before they are transposed
    rotated = heads_rows * cos + rotate_half(heads_rows) * sin
    return rotated[..., :query_heads, :].transpose(1, 2), rotated[..., query_heads:, :].transpose(1, 2)


def _fused_mlp_forward(self: LlamaMLP, x: torch.Tensor, residual: torch.Tensor | None = None) -> torch.Tensor:
    """``LlamaMLP.forward`` with the gate and up projections from one product (``fused_gate_up``), and
    ``act_fn(gate) * up`` in one call where ``talon.models.row_ops`` set one on the module
    (``act_times_up``: the same bits).  ``residual`` given: ``residual`` plus the output."""
    gate, up = self.fused_gate_up(x)
    act_times_up = vars(self).get("act_times_up")
    hidden = act_times_up(gate, up) if act_times_up is not None else self.act_fn(gate) * up
    return self.down_proj(hidden) if residual is None else self.down_proj.plus(hidden, residual)


def _residual_layer_forward(
    self: LlamaDecoderLayer,
    hidden_states: torch.Tensor,
    attention_mask: torch.Tensor | None = None,
    position_ids: torch.Tensor | None = None,
    past_key_values=None,
    use_cache: bool | None = False,
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = None,
    **kwargs,
) -> torch.Tensor:
    """``LlamaDecoderLayer.forward`` with each residual handed to the product that ends its branch (the
    attention's output projection, the MLP's down projection: ``PackedLinear.plus``), the same bits."""
    normed = self.input_layernorm(hidden_states)
    hidden_states, _ = self.self_attn(
        hidden_states=normed,
        attention_mask=attention_mask,
        position_ids=position_ids,
        past_key_values=past_key_values,
        use_cache=use_cache,
        position_embeddings=position_embeddings,
        residual=hidden_states,
        **kwargs,
    )
    return self.mlp(self.post_attention_layernorm(hidden_states), residual=hidden_states)


FUSIONS = (
    (LlamaAttention, ("q_proj", "k_proj", "v_proj"), "fused_qkv", _fused_attention_forward),
    (LlamaMLP, ("gate_proj", "up_proj"), "fused_gate_up", _fused_mlp_forward),
)
"""(class whose forward is fused, its parts, the attribute the fused product goes in, the fused forward)."""


def _fusible(module: nn.Module, cls: type, names: Sequence[str]) -> list[PackedLinear] | None:
    """The parts of ``module`` when it runs ``cls``'s own forward and they are packed float32 or bfloat16
    linears of one input width and dtype, with biases all or none and no row rule set; else None."""
    if not isinstance(module, cls) or type(module).forward is not cls.forward or "forward" in vars(module):
        return None
    parts = [getattr(module, name, None) for name in names]
    if not all(
        isinstance(p, PackedLinear)
        and p.packed is not None
        and p.weight.dtype in (torch.float32, torch.bfloat16)
        and not p.int8_rows
        and not p.min_rows
        and not p.block_rows
        for p in parts
    ):
        return None
    if any(len(set(values)) != 1 for values in zip(*((p.in_features, p.weight.dtype, p.bias is None) for p in parts))):
        return None
    return parts


def fuse_projections(model: nn.Module) -> int:
    """Give every Llama attention and MLP of ``model`` whose parts allow it (``_fusible``) and whose fused
    product gives the parts' bits (``FusedRows.same_bits``) its fused forward, and every decoder layer
    whose attention and MLP both took it the residual-passing forward (``hand_residuals``); returns how
    many attentions and MLPs were fused."""
    count = 0
    for module in model.modules():
        for cls, names, attribute, forward in FUSIONS:
            parts = _fusible(module, cls, names)
            if parts is None:
                continue
            fused = FusedRows(parts)
            if not fused.same_bits():
                continue
            setattr(module, attribute, fused)
            module.forward = types.MethodType(forward, module)
            for part in parts:
                part.packed = None  # the fused copy serves them; a direct call takes PyTorch's linear
            count += 1
    hand_residuals(model)
    return count


def hand_residuals(model: nn.Module) -> int:
    """Give every ``LlamaDecoderLayer`` of ``model`` that runs its class's own forward, with an attention
    and an MLP that run the fused forwards and end in ``PackedLinear`` products, ``_residual_layer_forward``;
    returns how many layers took it."""
    count = 0
    for layer in model.modules():
        if not isinstance(layer, LlamaDecoderLayer) or type(layer).forward is not LlamaDecoderLayer.forward:
            continue
        attention, mlp = getattr(layer, "self_attn", None), getattr(layer, "mlp", None)
        if "forward" in vars(layer) or not all(
            getattr(vars(module).get("forward"), "__func__", None) is forward
            and isinstance(getattr(module, name, None), PackedLinear)
            for module, forward, name in (
                (attention, _fused_attention_forward, "o_proj"),
                (mlp, _fused_mlp_forward, "down_proj"),
            )
        ):
            continue
        layer.forward = types.MethodType(_residual_layer_forward, layer)
        count += 1
    return count


def fuse(model: nn.Module) -> list[FusedRows]:
    """``fuse_projections(model)``, then every fused product the forward runs (``pack_for_device``'s
    ``fuse``: the load's few-row probe times them)."""
    fuse_projections(model)
    return fused_products(model)


def fused_products(model: nn.Module) -> list[FusedRows]:
    """Every fused product of ``model``'s attentions and MLPs."""
    return [p for m in model.modules() for _, _, a, _ in FUSIONS if isinstance(p := vars(m).get(a), FusedRows)]


def fused_layers(model: nn.Module) -> int:
    """How many attentions and MLPs of ``model`` run one fused product (for cost-curve keys and meta)."""
    return sum(1 for m in model.modules() if any(isinstance(vars(m).get(a), FusedRows) for _, _, a, _ in FUSIONS))
