"""A model's streamed weights gathered into one buffer (``talon.models.weight_arena``): the forward keeps its
bits, the weights lie one after another in the order the forward reads them, from a huge-page boundary."""

from __future__ import annotations

import pytest
import torch

from talon.models import stream_gemm
from talon.models.cpu_linear import pack_linears, use_packed_kernel
from talon.models.fused_linear import fuse_projections
from talon.models.weight_arena import (
    HUGE_PAGE,
    coded_weights,
    gather_stream_weights,
    gathered_bytes,
    huge_page_buffer,
    streamed_weights,
)
from tests.test_stream_gemm import four_bit_weight
from tests.tiny import prompt_ids, tiny_target

needs_kernel = pytest.mark.skipif(
    not stream_gemm.available(), reason="neither AVX-512 nor AVX2, or no C++ compiler here"
)


def _streamed_tiny():
    target = tiny_target(seed=3)
    model = target.model
    pack_linears(model)
    use_packed_kernel(model, "stream")
    fuse_projections(model)
    return model


@needs_kernel
def test_gathered_weights_keep_the_forwards_bits_and_lie_in_forward_order():
    model = _streamed_tiny()
    x = torch.tensor([prompt_ids(5, 9)])
    with torch.inference_mode():
        before = model(x).logits
    weights = streamed_weights(model)
    layer = model.model.layers[0]
    # a layer's fused q/k/v, its o projection, its fused gate/up, its down projection; then the next layer's
    assert weights[:2] == [layer.self_attn.fused_qkv.packed, layer.self_attn.o_proj.packed]
    assert weights[2:4] == [layer.mlp.fused_gate_up.packed, layer.mlp.down_proj.packed]
    assert weights[4] is model.model.layers[1].self_attn.fused_qkv.packed and weights[-1] is model.lm_head.packed
    sizes = [w.data.numel() for w in weights]
    assert gathered_bytes(model) == 0
    assert gather_stream_weights(model) == 4 * sum(sizes) == gathered_bytes(model)
    starts = [w.data.data_ptr() for w in weights]
    assert starts[0] % HUGE_PAGE == 0  # the buffer starts on a huge page
    assert [b - a for a, b in zip(starts, starts[1:])] == [4 * n for n in sizes[:-1]]  # one after another
    with torch.inference_mode():
        assert torch.equal(model(x).logits, before)


@needs_kernel
def test_weights_streamed_as_codes_are_gathered_as_bytes_with_the_forwards_bits():
    """Layers whose weights were dequantized from 4-bit blocks stream their codes: the arena holds their
    bytes (each weight from a cache line) beside the float32 ones, and the forward keeps its bits."""
    target = tiny_target(seed=3)
    model = target.model
    with torch.no_grad():
        for layer in model.model.layers:
            for linear in (layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj):
                linear.weight.copy_(four_bit_weight(tuple(linear.weight.shape), linear.weight.numel()))
    pack_linears(model)
    use_packed_kernel(model, "stream")
    fuse_projections(model)
    x = torch.tensor([prompt_ids(5, 9)])
    with torch.inference_mode():
        before = model(x).logits
    weights = streamed_weights(model)
    assert {w.data.dtype for w in weights} == {torch.float32, torch.uint8} and coded_weights(model) > 0
    sizes = [-(-w.data.numel() * w.data.element_size() // 64) * 64 for w in weights]
    assert gather_stream_weights(model) == sum(sizes) == gathered_bytes(model)
    starts = [w.data.data_ptr() for w in weights]
    assert starts[0] % HUGE_PAGE == 0 and [b - a for a, b in zip(starts, starts[1:])] == sizes[:-1]
    with torch.inference_mode():
        assert torch.equal(model(x).logits, before)


def test_a_model_without_streamed_weights_is_left_as_it_is():
    model = tiny_target(seed=4).model  # plain nn.Linear layers: nothing on TALON's kernel
    assert streamed_weights(model) == [] and gather_stream_weights(model) == 0 and gathered_bytes(model) == 0


def test_a_huge_page_buffer_starts_on_a_huge_page_and_holds_what_is_written():
    for count in (1, 1000, HUGE_PAGE + 3):
        buffer = huge_page_buffer(count)
        assert buffer.numel() == count and buffer.dtype == torch.uint8 and buffer.data_ptr() % HUGE_PAGE == 0
        buffer.copy_(torch.arange(count) % 251)
        assert buffer[-1].item() == (count - 1) % 251
