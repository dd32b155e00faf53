"""The CPU grouped-query attention (``talon.models.cpu_attention``) on tiny random Llamas: the same bits
as transformers' ``sdpa`` on tree rows, greedy output equal to transformers' own ``generate()``, and
left alone where it does not apply."""

from __future__ import annotations

import torch
from transformers import LlamaForCausalLM

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.model import ModelDrafter
from talon.engine.decode import run_to_end
from talon.engine.verify import Verifier
from talon.models.cpu_attention import GQA_ATTENTION, use_gqa_attention
from tests.test_tiny_engine import random_tree
from tests.tiny import greedy_generate, prompt_ids, tiny_config, tiny_target

NEW_TOKENS = 24


def tree_logits(target, seed: int, size: int) -> torch.Tensor:
    """The target's logits after every node of a random tree of ``size`` drafts at a 12-token context."""
    ids = prompt_ids(seed)
    with torch.inference_mode():
        verifier = Verifier(target)
        verifier.prefill(ids)
        return verifier.node_logits(random_tree(seed, ids[-1], size=size))


def test_grouped_heads_switch_to_the_cpu_attention_and_give_sdpa_bits_on_tree_rows():
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


def test_greedy_decoding_with_the_cpu_attention_equals_stock_generate():
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
