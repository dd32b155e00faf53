"""The CPU grouped-query attention (``talon.models.gqa_attention``) on tiny random Llamas: the same bits
as transformers' ``sdpa`` on tree rows, greedy output equal to transformers' own ``generate()``, and
left alone where it does not apply."""

from __future__ import annotations

import pytest
import torch
from transformers import LlamaForCausalLM

from talon.config import ConfigError, DecodeConfig, TreeConfig
from talon.drafters.model import ModelDrafter
from talon.engine.decode import run_to_end
from talon.engine.verify import Verifier
from talon.models import gqa_attention
from talon.models.gqa_attention import (
    GPU_ATTENTION_ENV,
    GQA_ATTENTION,
    gpu_attention_mode,
    grouped_matmul_attention,
    kernel_for,
    use_gqa_attention,
    use_gqa_attention_in,
)
from talon.runtime import graphs
from tests.test_tiny_engine import assert_head_method_equals_plain, random_tree
from tests.tiers import fast_only
from tests.tiny import greedy_generate, prompt_ids, random_head, tiny_config, tiny_target

NEW_TOKENS = 24


def tree_logits(target, seed: int, size: int) -> torch.Tensor:
    """The target's logits after every node of a random tree of ``size`` drafts at a 12-token context."""
    ids = prompt_ids(seed)
    with torch.inference_mode():
        verifier = Verifier(target)
        verifier.prefill(ids)
        return verifier.node_logits(random_tree(seed, ids[-1], size=size))


def test_grouped_heads_switch_on_the_cpu_and_give_sdpa_bits_on_tree_rows():
    stock, ours = tiny_target(), tiny_target()
    assert tiny_config().num_key_value_heads < tiny_config().num_attention_heads
    assert use_gqa_attention(ours.model)
    assert ours.model.config._attn_implementation == GQA_ATTENTION
    assert stock.model.config._attn_implementation == "sdpa"
    for seed, size in ((1, 5), (2, 20), (3, 40)):
        # several query rows under a tree mask: the same kernel on the same numbers, so the same bits
        assert torch.equal(tree_logits(stock, seed, size), tree_logits(ours, seed, size))
    # without a mask (a plain causal forward, as generate() prefills) transformers' own path runs
    ids = torch.tensor([prompt_ids(4)])
    with torch.inference_mode():
        assert torch.equal(stock.model(ids).logits, ours.model(ids).logits)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_an_additive_mask_gives_the_bits_of_sdpa_under_the_bool_mask(dtype):
    g = torch.Generator().manual_seed(7)
    for rows, keys in ((1, 30), (16, 47), (32, 90)):
        q = torch.randn(1, 6, rows, 16, generator=g).to(dtype)
        k, v = (torch.randn(1, 2, keys, 16, generator=g).to(dtype) for _ in range(2))
        mask = torch.rand(1, 1, rows, keys, generator=g) > 0.4
        mask[..., 0] = True  # every row sees a key
        additive = gqa_attention.additive_mask(mask, dtype)
        assert additive.dtype == dtype and set(additive.unique().tolist()) == {0.0, float("-inf")}
        sdpa = torch.nn.functional.scaled_dot_product_attention
        assert torch.equal(
            sdpa(q, k, v, attn_mask=mask, enable_gqa=True), sdpa(q, k, v, attn_mask=additive, enable_gqa=True)
        )


def test_our_cpu_forwards_pass_their_mask_additive(monkeypatch):
    from talon.runtime import kv_cache

    stock, ours = tiny_target(), tiny_target()
    use_gqa_attention(ours.model)
    assert gqa_attention.takes_additive_mask(ours.model) and not gqa_attention.takes_additive_mask(stock.model)
    made = []

    def counted(mask, dtype):
        made.append(mask.shape)
        return gqa_attention.additive_mask(mask, dtype)

    monkeypatch.setattr(kv_cache, "additive_mask", counted)
    assert torch.equal(tree_logits(stock, 8, 12), tree_logits(ours, 8, 12))
    assert made, "the grouped CPU model's forwards made no additive mask"
    made.clear()
    tree_logits(stock, 8, 12)
    assert made == []  # transformers' own attention keeps the bool mask


def test_greedy_decoding_with_the_grouped_attention_equals_stock_generate():
    stock, ours = tiny_target(), tiny_target()
    use_gqa_attention(ours.model)
    for seed in (4, 5, 6):
        expected = greedy_generate(stock, prompt_ids(seed), NEW_TOKENS)
        for method in ("ar", "talon"):
            drafter = ModelDrafter(ours) if method != "ar" else None
            trace = run_to_end(
                ours,
                drafter,
                TreeConfig(method=method),
                DecodeConfig(max_new_tokens=NEW_TOKENS),
                prompt_ids=prompt_ids(seed),
            )
            assert trace.output_ids == expected, (method, seed)


def test_generate_with_several_tokens_a_step_on_the_switched_model_equals_stock():
    """transformers gives no mask at all to an attention name without a mask function; prompt lookup's
    multi-token steps through ``generate()`` on our model then attended causally from the cache's start."""
    stock, ours = tiny_target(), tiny_target()
    use_gqa_attention(ours.model)
    for seed in (7, 8):
        ids = prompt_ids(seed) * 2  # repeated, so prompt lookup proposes several tokens a step
        with_lookup = greedy_generate(ours, ids, NEW_TOKENS, prompt_lookup_num_tokens=4)
        assert with_lookup == greedy_generate(stock, ids, NEW_TOKENS)


def test_models_without_grouped_heads_keep_their_attention():
    config = tiny_config()
    config.num_key_value_heads = config.num_attention_heads
    torch.manual_seed(0)
    model = LlamaForCausalLM(config).eval()
    assert not use_gqa_attention(model)
    assert model.config._attn_implementation == "sdpa"
    eager = tiny_target().model
    eager.set_attn_implementation("eager")
    assert not use_gqa_attention(eager)  # only transformers' sdpa is replaced
    assert eager.config._attn_implementation == "eager"


def test_the_kernel_follows_the_device_the_dtype_and_the_setting(monkeypatch):
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    monkeypatch.delenv(GPU_ATTENTION_ENV, raising=False)
    assert kernel_for(cpu, torch.float32) == kernel_for(cpu, torch.bfloat16) == "sdpa_gqa"
    assert kernel_for(cuda, torch.float32) == "matmul"
    assert kernel_for(cuda, torch.bfloat16) is None and kernel_for(torch.device("mps"), torch.float32) is None
    monkeypatch.setenv(GPU_ATTENTION_ENV, "sdpa")
    assert kernel_for(cuda, torch.float32) is None and kernel_for(cpu, torch.float32) == "sdpa_gqa"
    monkeypatch.setenv(GPU_ATTENTION_ENV, "flash")
    with pytest.raises(ConfigError, match="grouped, sdpa"):
        gpu_attention_mode()


@pytest.mark.parametrize("queries", [1, 5, 16])
def test_the_matmul_kernel_equals_sdpa_on_repeated_heads(queries):
    """9 query heads over 3 key/value heads, keys read through a strided view of a larger buffer (as a
    static runner's span), a random mask where every row sees its own key, bool and additive."""
    torch.manual_seed(queries)
    heads, kv_heads, dim, keys = 9, 3, 16, 40
    query = torch.randn(1, queries, heads, dim).transpose(1, 2)  # [1, heads, q, D], strided as a projection's
    buffer = torch.randn(2, kv_heads, 64, dim)
    key, value = buffer[0, :, :keys].unsqueeze(0), buffer[1, :, :keys].unsqueeze(0)
    mask = torch.rand(1, 1, queries, keys) < 0.5
    mask[0, 0, torch.arange(queries), keys - queries + torch.arange(queries)] = True
    expected = torch.nn.functional.scaled_dot_product_attention(
        query, key.repeat_interleave(3, dim=1), value.repeat_interleave(3, dim=1), attn_mask=mask, scale=0.3
    ).transpose(1, 2)
    ours = grouped_matmul_attention(query, key, value, mask, 0.3)
    assert ours.shape == (1, queries, heads, dim) and ours.is_contiguous()
    torch.testing.assert_close(ours, expected, atol=1e-5, rtol=1e-5)
    additive = torch.zeros(mask.shape).masked_fill(~mask, float("-inf"))
    torch.testing.assert_close(
        grouped_matmul_attention(query, key, value, additive, 0.3), expected, atol=1e-5, rtol=1e-5
    )


@pytest.fixture
def matmul_kernel(monkeypatch):
    """Every grouped forward takes the GPU's kernel, on the CPU; static runners on (eagerly)."""
    monkeypatch.setattr(gqa_attention, "kernel_for", lambda device, dtype: "matmul")
    monkeypatch.setenv(graphs.GRAPHS_ENV, "eager")
    calls = []

    def counted(query, *args):
        calls.append(query.shape[2])
        return grouped_matmul_attention(query, *args)

    monkeypatch.setattr(gqa_attention, "grouped_matmul_attention", counted)
    return calls


KERNEL_METHODS = ["talon", "eagle2", "hybrid", "talon-auto"]


@pytest.mark.parametrize("method", fast_only(("talon-auto",), KERNEL_METHODS, KERNEL_METHODS))
def test_every_method_with_the_matmul_kernel_on_static_runners_equals_its_plain_decoding(matmul_kernel, method):
    """The GPU's combination (batched-matmul attention in the target and the head, padded static forwards
    over key spans whose hidden rows hold stale values) on the CPU: each method's greedy output equals
    plain decoding of the same model, which equals stock ``generate()`` here."""
    target = tiny_target()
    head = random_head(target)
    assert use_gqa_attention(target.model) and use_gqa_attention_in(head, head.llama_config)
    assert head.llama_config._attn_implementation == GQA_ATTENTION
    assert_head_method_equals_plain(target, head, method)
    assert {1, 16} <= set(matmul_kernel)  # padded query rows: a plain step's and a tree's


def test_a_head_on_the_cpu_keeps_its_attention():
    target = tiny_target()
    head = random_head(target)
    assert not use_gqa_attention_in(head, head.llama_config)
    assert head.llama_config._attn_implementation == "sdpa"
