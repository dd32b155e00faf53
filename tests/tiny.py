"""A tiny random Llama-style target built in memory (no download, no file): 2 decoder layers of width 64,
a 64-token word-level vocabulary, float32 on the CPU.  One forward takes about a millisecond, so the
engine (KV cache, tree masks, verifier, sync and async loops, the head drafter) is tested in seconds.

The weights are drawn with a wider spread than a real model's initialisation (``initializer_range``
0.2), so next-token distributions are peaked enough that greedy decoding has no near-ties, and the
greedy text repeats itself (prompt lookup finds matches).  Token 0 is the end-of-sequence token; its
LM-head row is zero, so it is rare but possible.
"""

from __future__ import annotations

import torch
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from talon.drafters.head_model import DraftHead, HeadConfig
from talon.engine.verify import Verifier
from talon.models.loaded import LoadedModel

VOCAB = 64
EOS = 0
WORDS = ["<eos>", "<pad>"] + [f"w{i}" for i in range(VOCAB - 2)]


def tiny_tokenizer() -> PreTrainedTokenizerFast:
    """Whitespace-separated words ``w0 .. w61`` plus ``<eos>`` and ``<pad>``; no chat template."""
    tok = Tokenizer(models.WordLevel({w: i for i, w in enumerate(WORDS)}, unk_token="w0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return PreTrainedTokenizerFast(tokenizer_object=tok, eos_token="<eos>", pad_token="<pad>")


def tiny_config(layers: int = 2, **overrides) -> LlamaConfig:
    """A tiny Llama's config (heads of 16); ``overrides`` replace any of its values."""
    settings = dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=layers,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=512,
        eos_token_id=EOS,
        pad_token_id=1,
        bos_token_id=None,
        tie_word_embeddings=False,
        initializer_range=0.2,
        attn_implementation="sdpa",
    )
    return LlamaConfig(**{**settings, **overrides})


def tiny_target(seed: int = 0, layers: int = 2, name: str = "tiny-llama", **config) -> LoadedModel:
    """A fresh tiny target; the same ``seed`` gives the same weights (``config``: ``tiny_config`` overrides)."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(tiny_config(layers, **config)).eval().requires_grad_(False)
    with torch.no_grad():
        model.lm_head.weight[EOS].zero_()
    return LoadedModel(name, model, tiny_tokenizer(), torch.device("cpu"), torch.float32, identity=f"{name}-seed{seed}")


def prompt_ids(seed: int, length: int = 12) -> list[int]:
    """A random prompt of ``length`` non-special tokens."""
    g = torch.Generator().manual_seed(seed)
    return torch.randint(2, VOCAB, (length,), generator=g).tolist()


def greedy_generate(target: LoadedModel, ids: list[int], new_tokens: int, **generate_kwargs) -> list[int]:
    """transformers' own greedy ``generate`` (``generate_kwargs`` passed on, e.g. prompt lookup's), cut
    after the first EOS like our loop."""
    x = torch.tensor([ids])
    out = target.model.generate(
        x,
        attention_mask=torch.ones_like(x),
        do_sample=False,
        max_new_tokens=new_tokens,
        eos_token_id=EOS,
        pad_token_id=1,
        **generate_kwargs,
    )
    new = out[0, len(ids) :].tolist()
    return new[: new.index(EOS) + 1] if EOS in new else new


def random_head(target: LoadedModel, seed: int = 1) -> DraftHead:
    """An untrained draft head for ``target`` (weights drawn with ``seed``), frozen, in eval mode."""
    torch.manual_seed(seed)
    return DraftHead(HeadConfig.for_target(target)).eval().requires_grad_(False)


def greedy_references(target: LoadedModel, seeds, new_tokens: int) -> dict[int, list[int]]:
    """transformers' greedy output of ``new_tokens`` tokens per prompt seed (``prompt_ids(seed)``)."""
    return {s: greedy_generate(target, prompt_ids(s), new_tokens) for s in seeds}


def start_at(drafter, target: LoadedModel, ids: list[int]) -> torch.Tensor | None:
    """Start ``drafter`` at the context ``ids`` the way the decoding loop does (the target prefilled for
    the features a head reads); returns those features (``None`` for a drafter that reads none)."""
    verifier = Verifier(target, drafter.feature_layers)
    verifier.prefill(ids)
    drafter.start(ids, verifier.features)
    return verifier.features
