"""Fast tier: one packed product for a Llama layer's query/key/value and gate/up projections
(``talon.models.fused_linear``) on tiny random Llamas: the same bits as the separate products, nothing
changed in ``state_dict``, and only layers running transformers' own Llama forward."""

from __future__ import annotations

import pytest
import torch
from tiny import prompt_ids, tiny_config, tiny_target
from torch import nn
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaMLP, apply_rotary_pos_emb

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.decode import run_to_end
from talon.models import stream_gemm
from talon.models.cpu_linear import (
    KernelChoices,
    PackedLinear,
    draft_half_rows,
    halve_small_rows,
    mkl_packs_any_rows,
    onednn_linear_works,
    pack_for_device,
    pack_linears,
    packed_kernel,
    use_packed_kernel,
)
from talon.models.fused_linear import (
    FusedRows,
    fuse,
    fuse_projections,
    fused_layers,
    fused_products,
    hand_residuals,
    rotate_queries_and_keys,
)

pytestmark = pytest.mark.skipif(not onednn_linear_works(), reason="no oneDNN linear op in this torch build")


def _packed(model: nn.Module) -> nn.Module:
    pack_linears(model)
    return model


def _twins(config) -> tuple[nn.Module, nn.Module]:
    """Two packed copies of one random Llama (packed after the weights are in: a packed copy is made once)."""
    separate = LlamaForCausalLM(config).eval().requires_grad_(False)
    fused = LlamaForCausalLM(config).eval().requires_grad_(False)
    fused.load_state_dict(separate.state_dict())
    return _packed(separate), _packed(fused)


def _logits(model: nn.Module, rows: int) -> torch.Tensor:
    with torch.inference_mode():
        return model(torch.tensor([prompt_ids(3, rows)])).logits


def test_fused_layers_give_the_separate_products_bits_and_keep_the_state_dict():
    torch.manual_seed(0)
    separate, fused = _twins(tiny_config(3))
    keys = list(fused.state_dict())
    assert fuse_projections(fused) == 6 == fused_layers(fused)  # three attentions, three MLPs
    assert fused_layers(separate) == 0 and fuse_projections(fused) == 0  # a fused layer is left alone
    assert list(fused.state_dict()) == keys  # the fused weights are no parameters: checksums unchanged
    for rows in (1, 2, 7, 16):
        assert torch.equal(_logits(fused, rows), _logits(separate, rows)), rows
    layer = fused.model.layers[0]
    assert layer.self_attn.q_proj.packed is None and layer.mlp.up_proj.packed is None  # the memory stays the same
    x = torch.randn(4, 64)
    with torch.inference_mode():  # a part called directly still answers, through PyTorch's linear
        assert torch.allclose(layer.self_attn.k_proj(x), nn.functional.linear(x, layer.self_attn.k_proj.weight))


@pytest.mark.skipif(not mkl_packs_any_rows(192, 64), reason="no MKL packed sgemm that serves any row count")
def test_parts_on_mkls_packed_kernel_are_fused_on_it_with_the_same_bits():
    torch.manual_seed(2)
    separate, fused = _twins(tiny_config(2))
    for model in (separate, fused):
        assert use_packed_kernel(model, "mkl") == 15  # seven linears a layer and the LM head
    # the attentions at least: at one row MKL gives this tiny MLP's 256-wide stack other bits than its
    # 128-wide parts, and the load's check (``same_bits``) keeps such parts apart; the embedded model's
    # shapes all pass it
    assert fuse_projections(fused) >= 2
    assert {p.packed.kernel for p in fused_products(fused)} == {"mkl"} and packed_kernel(fused) == "mkl"
    for rows in (1, 2, 7, 16):
        assert torch.equal(_logits(fused, rows), _logits(separate, rows)), rows


def test_the_small_row_probe_times_the_products_the_forward_runs(monkeypatch):
    """At load (``pack_for_device`` with the fusion as its ``fuse``) the MKL-or-packed probe runs after the
    fusion, on fused products and on the layers left with their own packed copy, half each; the count it
    finds is every product's ``plain_rows``.  Scripted: MKL faster up to two rows."""
    monkeypatch.setenv("TALON_CPU_LINEAR", "auto")
    monkeypatch.setattr("talon.models.cpu_linear.choose_packed_kernel", lambda module, sample=16: "onednn")
    monkeypatch.setattr("talon.models.cpu_linear.KERNEL_CHOICES", KernelChoices())  # no earlier model's choice
    probed = []

    def timed(fns, reps=15):
        probed.append(fns[0].__defaults__[0])  # the inputs, one per probed product
        return [0.5 if fn.__name__ == "mkl" and len(fn.__defaults__[0][0]) <= 2 else 1.0 for fn in fns]

    monkeypatch.setattr("talon.models.cpu_linear.fastest_each", timed)
    monkeypatch.setattr("talon.models.cpu_linear.same_outputs", lambda a, b: False)  # a tie is a loss
    model = LlamaForCausalLM(tiny_config(3)).eval().requires_grad_(False)
    pack_for_device(model, fuse=fuse)
    fused = fused_products(model)
    assert len(fused) == 6 and {f.plain_rows for f in fused} == {2}
    assert {m.plain_rows for m in model.modules() if isinstance(m, PackedLinear)} == {2}
    widths = sorted(x.shape[1] for x in probed[0])
    # six fused, then the seven left single (three output and three down projections, which read 128, and
    # the LM head): within the sample of 16, eight each
    assert len(probed[0]) == 13 and widths.count(128) == 3


def test_biases_are_fused_too_and_a_few_rows_for_mkl_take_the_parts(monkeypatch):
    torch.manual_seed(1)
    config = tiny_config(1)
    config.attention_bias = config.mlp_bias = True
    separate, fused = _twins(config)
    assert fuse_projections(fused) == 2
    assert torch.equal(_logits(fused, 5), _logits(separate, 5))
    qkv = fused.model.layers[0].self_attn.fused_qkv
    qkv.plain_rows = 2  # MKL at up to two rows on this CPU: the parts (their own kernel) answer
    calls = []
    monkeypatch.setattr(FusedRows, "separate", lambda self, x: calls.append(x.shape) or [p(x) for p in self.parts])
    with torch.inference_mode():
        qkv(torch.randn(1, 2, 64))
        qkv(torch.randn(1, 3, 64))
    assert calls == [torch.Size([1, 2, 64])]


def test_layers_whose_few_rows_take_mkl_are_fused_too():
    """Where MKL wins the one- and two-row products (an Intel Xeon with AMX measured so at load), the
    load-time check compares the fused product with the parts' packed products, not with MKL's."""
    torch.manual_seed(4)
    separate, fused = _twins(tiny_config(2))
    for model in (separate, fused):
        for linear in model.modules():
            if isinstance(linear, PackedLinear):
                linear.plain_rows = 2
    assert fuse_projections(fused) == 4
    for rows in (1, 2, 3, 9):
        assert torch.equal(_logits(fused, rows), _logits(separate, rows)), rows


def test_only_transformers_own_forward_with_packed_float32_parts_is_fused(monkeypatch):
    class OwnMLP(LlamaMLP):
        def forward(self, x):  # another forward: what it does with the parts is not known
            return super().forward(x)

    torch.manual_seed(2)
    model = LlamaForCausalLM(tiny_config(2)).eval().requires_grad_(False)
    model.model.layers[0].mlp.__class__ = OwnMLP
    assert fuse_projections(model) == 0  # nothing packed
    pack_linears(model)
    model.model.layers[1].self_attn.v_proj = nn.Linear(64, 32, bias=False)  # one part not packed
    assert fuse_projections(model) == 2  # layer 0's attention and layer 1's MLP
    assert "forward" not in vars(model.model.layers[0].mlp) and "forward" not in vars(model.model.layers[1].self_attn)
    bf16 = _packed(LlamaForCausalLM(tiny_config(1)).to(torch.bfloat16).eval().requires_grad_(False))
    if onednn_linear_works(torch.bfloat16):
        assert fuse_projections(bf16) == 2  # bfloat16 too (the row-invariant forward sets its row rules)
    half = _packed(LlamaForCausalLM(tiny_config(1)).eval().requires_grad_(False))
    half.model.layers[0].mlp.up_proj.min_rows = 2  # a part with a row rule already set is left alone
    assert fuse_projections(half) == 1
    monkeypatch.setattr(FusedRows, "same_bits", lambda self: False)
    other = _packed(LlamaForCausalLM(tiny_config(1)).eval().requires_grad_(False))
    assert fuse_projections(other) == 0  # a build whose fused product rounds otherwise keeps the parts
    mlp = other.model.layers[0].mlp
    assert all(isinstance(p, PackedLinear) and p.packed is not None for p in (mlp.gate_proj, mlp.up_proj))


@pytest.mark.parametrize("kernel", ["onednn", "stream"])
def test_layers_hand_their_residuals_to_the_products_with_the_same_bits(kernel):
    """A decoder layer whose attention and MLP run the fused forwards passes each residual to the
    product that ends its branch (added as the streaming kernel stores its outputs, else separately):
    the class's own forward's bits at every row count; a layer with a forward of its own is left alone."""
    if kernel == "stream" and not stream_gemm.available():
        pytest.skip("no streaming kernel here")
    torch.manual_seed(5)
    separate, fused = _twins(tiny_config(3))
    for model in (separate, fused):
        use_packed_kernel(model, kernel)
    assert fuse_projections(fused) == 6
    assert all("forward" in vars(layer) for layer in fused.model.layers)
    for rows in (1, 2, 9, 17, 33):
        assert torch.equal(_logits(fused, rows), _logits(separate, rows)), rows
    for layer in fused.model.layers:
        del layer.forward
    fused.model.layers[1].forward = fused.model.layers[1].forward  # a forward of its own
    fused.model.layers[2].mlp.down_proj = nn.Linear(128, 64)  # not a packed product
    assert hand_residuals(fused) == 1


def test_a_float32_drafters_fused_products_take_bfloat16_copies_for_few_rows_as_its_separate_ones(monkeypatch):
    """``halve_small_rows`` with the fused products: at up to ``draft_half_rows()`` rows a fused product
    reads the bfloat16 copy of its stacked weights, giving the bits the separate halved products give (an
    output element is the same dot product whichever rows sit beside it), and the float32 ones above."""
    if not stream_gemm.available():
        pytest.skip("no streaming kernel here")
    monkeypatch.setenv("TALON_CPU_LINEAR", "stream")
    torch.manual_seed(6)
    separate, fused = _twins(tiny_config(2))
    for model in (separate, fused):
        use_packed_kernel(model, "stream")
    assert fuse_projections(fused) == 4
    half = draft_half_rows()
    assert halve_small_rows(separate) == half == halve_small_rows(fused, fused_products(fused)) > 0
    assert all(p.half_rows == half and p.half.dtype == torch.bfloat16 for p in fused_products(fused))
    for rows in (1, half, half + 1, 2 * half + 1):
        assert torch.equal(_logits(fused, rows), _logits(separate, rows)), rows
    halved, full = _logits(fused, 1), _logits(fused, half + 1)[:, :1]
    assert not torch.equal(halved, full)  # (the first row's logits: its own bfloat16 copies, then float32)


def test_a_gradient_takes_the_parts():
    torch.manual_seed(3)
    model = _packed(LlamaForCausalLM(tiny_config(1)).eval())
    assert fuse_projections(model) == 2
    x = torch.randn(1, 3, 64, requires_grad=True)
    out = model.model.layers[0].mlp(x)
    out.sum().backward()  # the packed op has no backward: the parts' PyTorch linears carry it
    assert x.grad is not None and x.grad.abs().sum() > 0


def test_greedy_tree_decoding_on_a_fused_target_equals_its_plain_decoding():
    target = tiny_target(seed=4)
    pack_linears(target.model)
    assert fuse_projections(target.model) == 4
    ids, dec = prompt_ids(5), DecodeConfig(max_new_tokens=24)
    plain = run_to_end(target, None, TreeConfig(method="ar"), dec, prompt_ids=ids)
    drafter = drafter_for("talon", "layers:1", target)  # the self-drafter shares the fused layers
    tree = run_to_end(target, drafter, TreeConfig(method="talon", budget=8), dec, prompt_ids=ids)
    assert tree.output_ids == plain.output_ids and len(plain.output_ids) == 24
    assert len(tree.steps) < len(plain.steps)  # drafts were accepted


def test_the_rotary_over_query_and_key_heads_at_once_gives_transformers_bits():
    torch.manual_seed(5)
    out = torch.randn(2, 7, (9 + 3 + 3) * 64)  # one product's rows: 9 query heads, 3 key, 3 value
    heads_rows = out[..., : 12 * 64].view(2, 7, -1, 64)
    angles = torch.randn(2, 7, 64)
    cos, sin = angles.cos(), angles.sin()
    query, key = rotate_queries_and_keys(heads_rows, 9, cos, sin)
    q, k = out[..., : 9 * 64].view(2, 7, -1, 64), out[..., 9 * 64 : 12 * 64].view(2, 7, -1, 64)
    want_q, want_k = apply_rotary_pos_emb(q.transpose(1, 2), k.transpose(1, 2), cos, sin)
    assert query.shape == (2, 9, 7, 64) and key.shape == (2, 3, 7, 64)
    assert torch.equal(query, want_q) and torch.equal(key, want_k)
