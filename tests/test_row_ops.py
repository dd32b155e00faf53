"""Fast tier: a Llama layer's norm, rotary embedding and MLP's silu(gate) * up in one C++ call each
(``talon.models.row_ops``): transformers' bits at every shape, on tiny random Llamas the same logits and
the same greedy decoding, and only float32 CPU models running transformers' own forward take them."""

from __future__ import annotations

import pytest
import torch
from tiny import prompt_ids, tiny_config, tiny_target
from torch import nn
from transformers import LlamaForCausalLM
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.decode import run_to_end
from talon.models import fused_linear, row_ops
from talon.models.cpu_linear import onednn_linear_works, pack_linears
from talon.models.fused_linear import fuse_projections

pytestmark = pytest.mark.skipif(not row_ops.available(), reason="no C++ compiler here")

EPS = 9.999999747378752e-06  # SmolLM2's, a float32 value as a Python float


@pytest.mark.parametrize("width", [7, 64, 576, 1536])
def test_the_norm_gives_transformers_bits_at_every_shape_and_scale(width):
    torch.manual_seed(width)
    norm = LlamaRMSNorm(width, eps=EPS)
    with torch.no_grad():
        norm.weight.normal_()
    ext = row_ops.extension()
    with torch.inference_mode():
        for shape in ((1, 1), (1, 3), (2, 5), (1, 17), (1, 300)):
            for scale in (1e-4, 1.0, 40.0):
                x = torch.randn(*shape, width) * scale
                assert torch.equal(ext.rms_norm(x, norm.weight, EPS), norm(x)), (shape, scale)
        strided = torch.randn(1, 6, 2 * width)[..., ::2]  # not contiguous: copied first
        assert torch.equal(ext.rms_norm(strided, norm.weight, EPS), norm(strided))
        big = torch.randn(1, 4, width) * 1e18  # the squares overflow as transformers' do
        assert torch.equal(ext.rms_norm(big, norm.weight, EPS), norm(big))


@pytest.mark.parametrize("rows", [1, 3, 16, 129])
def test_the_rotary_embedding_gives_transformers_bits(rows):
    torch.manual_seed(rows)
    out = torch.randn(2, rows, (9 + 3 + 3) * 64)  # a fused product's rows: 9 query heads, 3 key, 3 value
    heads_rows = out[..., : 12 * 64].view(2, rows, -1, 64)  # rows 960 apart, each row's heads packed
    angles = torch.randn(2, rows, 64) * 50
    for cos, sin in ((angles.cos(), angles.sin()), (angles[:1].cos(), angles[:1].sin())):  # per batch or shared
        want = fused_linear.rotate_queries_and_keys(heads_rows, 9, cos, sin)
        got = row_ops.rotate_queries_and_keys(heads_rows, 9, cos, sin)
        for w, g in zip(want, got):
            assert g.shape == w.shape and torch.equal(g, w)
    # what the extension does not take goes to the Python form: a tensor whose heads are not packed
    loose = torch.randn(1, rows, 64, 4).transpose(-1, -2)
    cos, sin = angles[:1].cos(), angles[:1].sin()
    for w, g in zip(
        fused_linear.rotate_queries_and_keys(loose, 2, cos, sin), row_ops.rotate_queries_and_keys(loose, 2, cos, sin)
    ):
        assert torch.equal(g, w)


def _twins(layers: int = 2) -> tuple[nn.Module, nn.Module]:
    torch.manual_seed(layers)
    stock = LlamaForCausalLM(tiny_config(layers)).eval().requires_grad_(False)
    ours = LlamaForCausalLM(tiny_config(layers)).eval().requires_grad_(False)
    ours.load_state_dict(stock.state_dict())
    return stock, ours


needs_silu_mul = pytest.mark.skipif(
    not (row_ops.available() and row_ops.extension().silu_mul_available()),
    reason="the one-call silu * up needs AVX-512 and PyTorch's SLEEF",
)


@needs_silu_mul
@pytest.mark.parametrize("width", [7, 31, 32, 48, 64, 1536, 1550])
def test_silu_times_up_gives_pytorchs_bits_at_every_width_and_row_count(width):
    """Whole pairs of vectors and the scalar tail (width mod 32), one row or many (the rows split over the
    threads), rows of a wider tensor (the fused product's view), magnitudes from 1e-4 to 1e3, and the
    values where the exponential overflows, underflows or is infinite."""
    torch.manual_seed(width)
    ext = row_ops.extension()
    with torch.inference_mode():
        for rows in (1, 3, 32, 200):
            both = torch.randn(1, rows, 2 * width) * 10.0 ** torch.randint(-4, 4, (1, rows, 2 * width))
            specials = torch.tensor([0.0, -0.0, float("inf"), -float("inf"), 88.7, -88.8, -104.0, 1e-40])
            both[0, 0, : min(width, 8)] = specials[: min(width, 8)]
            gate, up = both.split(width, dim=-1)
            want = nn.functional.silu(gate) * up
            got = ext.silu_mul(gate, up)
            assert got.shape == want.shape and got.is_contiguous()
            assert torch.equal(got.view(torch.int32), want.view(torch.int32)), rows
            assert torch.equal(row_ops.silu_times_up(gate, up).view(torch.int32), want.view(torch.int32))
    assert row_ops.silu_mul_matches(width)


def test_silu_times_up_leaves_what_the_extension_does_not_take_to_pytorch():
    gate = torch.randn(2, 16, dtype=torch.bfloat16)
    assert torch.equal(row_ops.silu_times_up(gate, gate), nn.functional.silu(gate) * gate)
    leaf = torch.randn(2, 16, requires_grad=True)
    row_ops.silu_times_up(leaf, leaf).sum().backward()  # the C++ form has no backward: PyTorch's carries it
    assert leaf.grad is not None


@pytest.mark.skipif(not onednn_linear_works(), reason="no oneDNN linear op in this torch build")
def test_a_fused_target_with_the_row_ops_gives_the_same_logits(monkeypatch):
    stock, ours = _twins(3)
    for model in (stock, ours):
        pack_linears(model)
        assert fuse_projections(model) == 6
    silu = 3 if row_ops.silu_mul_matches(128) else 0  # the MLPs' silu(gate) * up, where it runs here
    assert row_ops.use_row_ops(ours) == 3 * 2 + 1 + 3 + silu  # two norms a layer, the final norm, three attentions
    assert row_ops.uses_row_ops(ours) and not row_ops.uses_row_ops(stock)
    assert row_ops.use_row_ops(ours) == 0  # a second call changes nothing
    calls = {"rms_norm": 0, "rotary": 0, "silu_mul": 0}
    real = row_ops.extension()

    class Counting:
        def __getattr__(self, name):
            calls[name] += 1
            return getattr(real, name)

    monkeypatch.setattr(row_ops, "extension", lambda: Counting())
    with torch.inference_mode():
        for rows in (1, 2, 9, 40):
            ids = torch.tensor([prompt_ids(3, rows)])
            assert torch.equal(ours(ids).logits, stock(ids).logits), rows
    # the C++ forms ran: 7 norms, 3 rotaries and (where it runs) 3 MLPs' silu * up a forward
    assert calls == {"rms_norm": 4 * 7, "rotary": 4 * 3, "silu_mul": 4 * silu}


def test_only_float32_cpu_norms_with_transformers_forward_take_it(monkeypatch):
    class OwnNorm(LlamaRMSNorm):
        def forward(self, x):  # another forward: left alone
            return super().forward(x)

    _, model = _twins(1)
    model.model.norm.__class__ = OwnNorm
    assert row_ops.use_row_ops(model) == 2  # the layer's two norms; not fused: no attention changes
    assert "forward" not in vars(model.model.norm)
    gelu = LlamaForCausalLM(tiny_config(1, hidden_act="gelu")).eval().requires_grad_(False)
    pack_linears(gelu)
    fuse_projections(gelu)
    row_ops.use_row_ops(gelu)
    assert "act_times_up" not in vars(gelu.model.layers[0].mlp)  # another activation: PyTorch's operations
    bf16 = LlamaForCausalLM(tiny_config(1)).to(torch.bfloat16).eval()
    assert row_ops.use_row_ops(bf16) == 0 and not row_ops.uses_row_ops(bf16)
    monkeypatch.setenv("TALON_ROW_OPS", "0")
    assert row_ops.use_row_ops(_twins(1)[1]) == 0
    monkeypatch.setenv("TALON_ROW_OPS", "sometimes")
    with pytest.raises(ConfigError, match="TALON_ROW_OPS"):
        row_ops.use_row_ops(_twins(1)[1])


def test_a_gradient_or_another_dtype_takes_transformers_forward():
    _, model = _twins(1)
    row_ops.use_row_ops(model)
    norm = model.model.layers[0].input_layernorm
    norm.weight.requires_grad_(True)
    x = torch.randn(1, 3, 64, requires_grad=True)
    norm(x).sum().backward()  # the C++ form has no backward: transformers' carries it
    assert x.grad is not None and norm.weight.grad is not None
    with torch.inference_mode():
        half = torch.randn(1, 2, 64, dtype=torch.bfloat16)
        assert norm(half).dtype == torch.float32  # transformers' own (a float32 weight times the bfloat16 rows)


@pytest.mark.skipif(not onednn_linear_works(), reason="no oneDNN linear op in this torch build")
def test_greedy_tree_decoding_with_the_row_ops_equals_plain_decoding_without():
    stock, ours = tiny_target(seed=6), tiny_target(seed=6)
    for target in (stock, ours):
        pack_linears(target.model)
        fuse_projections(target.model)
    assert row_ops.use_row_ops(ours.model) > 0
    ids, dec = prompt_ids(7), DecodeConfig(max_new_tokens=24)
    plain = run_to_end(stock, None, TreeConfig(method="ar"), dec, prompt_ids=ids)
    drafter = drafter_for("talon", "layers:1", ours)
    tree = run_to_end(ours, drafter, TreeConfig(method="talon", budget=8), dec, prompt_ids=ids)
    assert tree.output_ids == plain.output_ids and len(plain.output_ids) == 24
    assert len(tree.steps) < len(plain.steps)  # drafts were accepted


def test_a_failed_build_leaves_transformers_forward(monkeypatch, caplog):
    """No compiler (the loader raises): the extension is None with the reason logged, and a model keeps
    transformers' norms and rotary embedding rather than failing to load."""
    from torch.utils import cpp_extension

    def no_compiler(*args, **kwargs):
        raise RuntimeError("Ninja is required to load C++ extensions")

    monkeypatch.setattr(cpp_extension, "load", no_compiler)
    try:
        row_ops.extension.cache_clear()
        with caplog.at_level("WARNING"):
            assert row_ops.extension() is None and not row_ops.available()
        assert "Ninja is required" in caplog.text
        assert "transformers' forward, PyTorch's argmax and SDPA serve" in caplog.text
        _, model = _twins(1)
        assert row_ops.use_row_ops(model) == 0 and not row_ops.uses_row_ops(model)
    finally:
        row_ops.extension.cache_clear()  # the next caller loads the real one again
