"""The row-invariant bfloat16 CPU forward (``talon.models.row_invariant``): its attention is attention
(SDPA's numbers within rounding), a tree row gets the bits a one-row forward of the same path gets (the
attention alone over contexts that cross its chunk boundaries, then whole tiny Llamas in bfloat16),
greedy speculative decoding equals plain decoding, and models it does not apply to are left alone.
The stock bfloat16 forward is the negative control: it does not give tree rows those bits."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch
from torch import nn

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.model import ModelDrafter
from talon.engine.decode import run_to_end
from talon.models import row_invariant
from talon.models.cpu_linear import PackedLinear, block_rows, call_rows, onednn_linear_works, pack_linears
from talon.models.fused_linear import fuse_projections, fused_products
from talon.models.gqa_attention import use_gqa_attention
from talon.models.loaded import LoadedModel
from talon.models.row_invariant import (
    BLOCK_ROWS,
    CALL_ROWS,
    CHUNK,
    INVARIANT_ATTENTION,
    LONE_ROW_INPUTS,
    LONGEST_CHAIN,
    invariant_attention,
    invariant_rows,
    make_row_invariant,
    rows_invariant,
)
from talon.runtime.kv_cache import CachedLM
from tests.test_tiny_engine import random_tree
from tests.tiny import prompt_ids, tiny_target

needs_bf16_kernel = pytest.mark.skipif(
    not onednn_linear_works(torch.bfloat16), reason="no packed bfloat16 linear on this CPU (needs AVX512-BF16)"
)


class _Heads:
    num_key_value_groups = 3


def tree_parents(size: int, seed: int, chain: int) -> list[int]:
    """Parents of a tree's ``size`` nodes (node 0 the root, -1): a chain of ``chain`` nodes, so paths
    reach past a chunk boundary, then nodes under random earlier ones."""
    g = torch.Generator().manual_seed(seed)
    parents = [-1]
    for i in range(1, size):
        parents.append(i - 1 if i < chain else int(torch.randint(0, i, (), generator=g)))
    return parents


def ancestors(parents: list[int], node: int) -> list[int]:
    path = [node]
    while parents[path[-1]] != -1:
        path.append(parents[path[-1]])
    return path[::-1]


def tree_case(prefix: int, size: int, dtype: torch.dtype, seed: int = 0, chain: int = 40):
    """Random query / key / value for ``prefix`` committed keys and a tree of ``size`` rows (9 query
    heads on 3 key/value heads, as SmolLM2's), and the tree's mask ``[1, 1, size, prefix + size]``."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(1, 9, size, 64, generator=g).to(dtype)
    k = torch.randn(1, 3, prefix + size, 64, generator=g).to(dtype)
    v = torch.randn(1, 3, prefix + size, 64, generator=g).to(dtype)
    parents = tree_parents(size, seed, chain)
    mask = torch.zeros(size, prefix + size, dtype=torch.bool)
    mask[:, :prefix] = True
    for node in range(size):
        mask[node, [prefix + a for a in ancestors(parents, node)]] = True
    return q, k, v, mask[None, None], parents


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_attention_is_sdpa_within_rounding(dtype):
    q, k, v, mask, _ = tree_case(prefix=150, size=40, dtype=dtype)
    ours, _ = invariant_attention(_Heads, q, k, v, mask, scaling=0.125)
    ref = nn.functional.scaled_dot_product_attention(
        q.float(), k.float(), v.float(), attn_mask=mask, scale=0.125, enable_gqa=True
    ).transpose(1, 2)
    assert ours.dtype == dtype and ours.shape == (1, 40, 9, 64)
    assert torch.allclose(ours.float(), ref, atol=1e-5 if dtype == torch.float32 else 1e-2)
    # without a mask: causal over the last rows, as a plain forward's block
    causal, _ = invariant_attention(_Heads, q[:, :, :5], k[:, :, :155], v[:, :, :155], None, scaling=0.125)
    full = torch.ones(5, 155, dtype=torch.bool).tril(150)
    ref = nn.functional.scaled_dot_product_attention(
        q[:, :, :5].float(), k[:, :, :155].float(), v[:, :, :155].float(), attn_mask=full, scale=0.125, enable_gqa=True
    )
    assert torch.allclose(causal.float(), ref.transpose(1, 2), atol=1e-5 if dtype == torch.float32 else 1e-2)


@pytest.mark.parametrize("prefix,size", [(10, 30), (100, 60), (200, 129), (300, 8)])
def test_a_tree_row_gets_the_bits_of_its_path_computed_alone(prefix, size):
    """Each tree row against the same row in a one-row call over the committed keys and its path's
    keys, contiguous (what plain decoding computes once the path is committed); the paths cross chunk
    boundaries (chunks of 64 positions) and the largest tree spans ``LONGEST_CHAIN`` keys."""
    assert CHUNK - 1 + 129 <= LONGEST_CHAIN
    q, k, v, mask, parents = tree_case(prefix, size, torch.bfloat16, seed=prefix)
    tree_out, _ = invariant_attention(_Heads, q, k, v, mask, scaling=0.125)
    for node in range(size):
        keep = list(range(prefix)) + [prefix + a for a in ancestors(parents, node)]
        alone, _ = invariant_attention(
            _Heads, q[:, :, node : node + 1], k[:, :, keep], v[:, :, keep], None, scaling=0.125
        )
        assert torch.equal(alone[0, 0], tree_out[0, node]), (prefix, size, node)


def bf16_tiny(seed: int = 0, invariant: bool = True) -> LoadedModel:
    """A tiny random Llama in bfloat16 with packed linears and, if ``invariant``, its projections fused
    and the row-invariant forward, as the loader builds it (else the stock-attention negative control)."""
    target = replace(tiny_target(seed), dtype=torch.bfloat16)
    target.model.to(torch.bfloat16)
    pack_linears(target.model)
    if invariant:
        assert fuse_projections(target.model) == 2 * target.model.config.num_hidden_layers
        assert make_row_invariant(target.model)
        assert all(p.plain_rows == 0 for p in fused_products(target.model))
        assert target.model.config._attn_implementation == INVARIANT_ATTENTION
    else:
        use_gqa_attention(target.model)
    return target


def path_rows_equal(target: LoadedModel, prefix: list[int], size: int, seed: int) -> list[bool]:
    """Verify a random tree after ``prefix`` in one forward; for its deepest path, whether each row's
    logits equal (bitwise) those of the same token fed alone after the path before it."""
    tree = random_tree(seed, prefix[-1], size=size)
    path = tree.path_to(max(range(len(tree)), key=lambda n: tree.depth[n]))
    with torch.inference_mode():
        one = CachedLM(target)
        one.extend_committed(prefix[:-1])
        alone = [one.extend_committed([tree.token[n]], logit_rows="all").logits[0] for n in path]
        verify = CachedLM(target)
        verify.extend_committed(prefix[:-1])
        rows = verify.forward_nodes(tree, list(range(len(tree))), len(prefix) - 1, logit_rows="all").logits
    return [torch.equal(alone[i], rows[n]) for i, n in enumerate(path)]


@needs_bf16_kernel
def test_tree_rows_of_a_bfloat16_model_equal_plain_rows_and_the_stock_forward_does_not():
    long_prompt = (prompt_ids(3, length=40) * 4)[:150]  # past two chunk boundaries
    for seed, prefix, size in ((1, prompt_ids(1), 20), (2, long_prompt, 60), (3, long_prompt, 120)):
        assert all(path_rows_equal(bf16_tiny(), prefix, size, seed)), (seed, size)
    stock = [all(path_rows_equal(bf16_tiny(invariant=False), long_prompt, 60, s)) for s in (4, 5, 6)]
    assert not all(stock)  # the control: the stock bfloat16 forward gives some tree row other bits


def greedy_runs(target: LoadedModel, seed: int) -> dict[str, list[int]]:
    """Greedy ar, TALON and EAGLE-2 (N=40, a tiny model drafting) on a 70-token prompt."""
    ids = prompt_ids(seed, length=70)
    return {
        method: run_to_end(
            target,
            ModelDrafter(bf16_tiny(seed=9)) if method != "ar" else None,
            TreeConfig(method=method, budget=40),
            DecodeConfig(max_new_tokens=40),
            prompt_ids=ids,
        ).output_ids
        for method in ("ar", "talon", "eagle2")
    }


@needs_bf16_kernel
def test_greedy_speculative_decoding_in_bfloat16_equals_plain_decoding():
    target = bf16_tiny()
    for seed in (4, 5, 6, 7):
        runs = greedy_runs(target, seed)
        assert runs["talon"] == runs["ar"] == runs["eagle2"], seed
    # the control: with the stock bfloat16 forward, seed 5's speculative runs leave plain decoding
    stock = greedy_runs(bf16_tiny(invariant=False), 5)
    assert stock["talon"] != stock["ar"] and stock["eagle2"] != stock["ar"]


@needs_bf16_kernel
def test_long_linears_give_every_row_count_the_same_bits():
    """The down projection's shape (1536 inputs): the packed kernel alone gives some row other bits at
    some row count (the control: a lone row on the Zen 4, most counts under 37 with AMX); set by
    ``invariant_rows`` (a lone row beside zeros, or blocks of 16 rows where that is not enough), every
    count agrees, and so does a row among other rows."""
    torch.manual_seed(0)
    parent = nn.Sequential(nn.Linear(1536, 576, bias=False).to(torch.bfloat16))
    pack_linears(parent)
    packed = parent[0]
    assert isinstance(packed, PackedLinear) and packed.in_features > LONE_ROW_INPUTS
    assert not rows_invariant([packed])  # the control
    assert invariant_rows([packed])
    assert packed.min_rows == 2 and packed.block_rows in (0, BLOCK_ROWS)
    assert list(packed.state_dict()) == ["weight"]  # what the draft head's weight check reads
    x = torch.randn(129, 1536).to(torch.bfloat16)
    with torch.inference_mode():
        rows = packed(x)
        assert torch.equal(torch.cat([packed(x[i : i + 1]) for i in range(len(x))]), rows)
        assert torch.equal(packed(x[0]), rows[0])  # a 1-D input keeps its shape
        for n in (2, 3, 17, 64):
            assert torch.equal(packed(x[:n]), rows[:n])


def test_blocks_of_rows_are_the_linear_padded_and_multiplied_a_block_a_call(monkeypatch):
    """``block_rows``: 40 rows are three products of 16 rows (the last padded with zeros), the result
    the linear's within rounding, shapes kept (a 1-D row, no rows at all)."""
    torch.manual_seed(1)
    parent = nn.Sequential(nn.Linear(64, 24))
    pack_linears(parent)
    packed = parent[0]
    assert block_rows(parent) == 0
    packed.block_rows = BLOCK_ROWS
    assert block_rows(parent) == BLOCK_ROWS  # in the cost curve's key and the bench meta
    calls = []
    product = PackedLinear.packed_product
    monkeypatch.setattr(PackedLinear, "packed_product", lambda self, x: calls.append(x.shape[0]) or product(self, x))
    x = torch.randn(2, 20, 64)
    with torch.inference_mode():
        out = packed(x)
        assert calls == [16, 16, 16]
        assert out.shape == (2, 20, 24) and torch.allclose(
            out, nn.functional.linear(x, packed.weight, packed.bias), atol=1e-5
        )
        assert packed(x[0, 0]).shape == (24,) and packed(x[0, :0]).shape == (0, 24)
        packed.block_rows, packed.min_rows = 0, 2
        calls.clear()
        assert torch.allclose(packed(x[0, :1]), out[0, :1], atol=1e-5) and calls == [2]


def test_two_blocks_a_call_are_taken_where_each_keeps_its_own_bits(monkeypatch):
    """``call_rows``: 40 rows in blocks of 16 are a call of 32 and one of 16, 20 rows one call; and
    ``invariant_rows`` takes two blocks a call only where the probe finds every block's bits unchanged
    (a kernel that rounds a 32-row call another way is left at one block a call)."""
    torch.manual_seed(2)
    parent = nn.Sequential(nn.Linear(64, 24))
    pack_linears(parent)
    packed = parent[0]
    packed.block_rows, packed.call_rows = BLOCK_ROWS, CALL_ROWS
    assert call_rows(parent) == CALL_ROWS  # in the cost curve's key and the bench meta
    calls = []
    product = PackedLinear.packed_product
    monkeypatch.setattr(PackedLinear, "packed_product", lambda self, x: calls.append(x.shape[0]) or product(self, x))
    x = torch.randn(40, 64)
    with torch.inference_mode():
        out = packed(x)
        assert calls == [32, 16] and torch.allclose(out, nn.functional.linear(x, packed.weight, packed.bias), atol=1e-5)
        calls.clear()
        assert torch.equal(packed(x[:20]), out[:20]) and calls == [32]

        def row_by_row(self, x):  # a kernel that computes each row alone: the same bits in any call
            return torch.stack([nn.functional.linear(row, self.weight, self.bias) for row in x])

        def rounds_wide_calls_apart(self, x):  # ... but rounds a call of more than one block otherwise
            return row_by_row(self, x) + (1e-3 if x.shape[0] > BLOCK_ROWS else 0.0)

        real = row_invariant.rows_invariant  # made to refuse the unblocked rule, to reach the blocks
        monkeypatch.setattr(
            row_invariant, "rows_invariant", lambda linears: linears[0].block_rows > 0 and real(linears)
        )
        for kernel, call in ((rounds_wide_calls_apart, 0), (row_by_row, CALL_ROWS)):
            monkeypatch.setattr(PackedLinear, "packed_product", kernel)
            packed.block_rows = packed.call_rows = packed.min_rows = 0
            assert invariant_rows([packed]) and (packed.block_rows, packed.call_rows) == (BLOCK_ROWS, call)


def test_models_it_does_not_apply_to_are_left_alone():
    fp32 = tiny_target()
    pack_linears(fp32.model)
    assert not make_row_invariant(fp32.model)  # float32 keeps SDPA and MKL's one-row kernel
    assert fp32.model.config._attn_implementation == "sdpa"
    unpacked = tiny_target()
    unpacked.model.to(torch.bfloat16)
    assert not make_row_invariant(unpacked.model)  # no packed linears ($TALON_CPU_LINEAR=plain)
    assert unpacked.model.config._attn_implementation == "sdpa"
    eager = tiny_target()
    eager.model.to(torch.bfloat16)
    pack_linears(eager.model)
    eager.model.set_attn_implementation("eager")
    assert not make_row_invariant(eager.model)  # only transformers' sdpa is replaced


def test_keys_of_earlier_forwards_that_not_every_row_sees_are_attended_correctly():
    """A draft model feeds its tree a layer a forward: keys before this forward's rows include earlier
    tree rows that only some rows see (their positions are not the sequence's, so only correctness is
    asked); and a batch of two sequences takes transformers' sdpa."""
    g = torch.Generator().manual_seed(3)
    committed, old, new = 100, 40, 12
    kv = committed + old + new
    q = torch.randn(1, 9, new, 64, generator=g)
    k, v = torch.randn(1, 3, kv, 64, generator=g), torch.randn(1, 3, kv, 64, generator=g)
    mask = torch.zeros(new, kv, dtype=torch.bool)
    mask[:, :committed] = True
    for row in range(new):
        mask[row, committed + torch.randperm(old, generator=g)[:5]] = True  # ancestors among the old rows
        mask[row, committed + old + row] = True
    ours, _ = invariant_attention(_Heads, q, k, v, mask[None, None], scaling=0.125)
    ref = nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125, enable_gqa=True)
    assert torch.allclose(ours, ref.transpose(1, 2), atol=1e-5)
    pair, _ = invariant_attention(
        _Heads,
        q.expand(2, -1, -1, -1),
        k.expand(2, -1, -1, -1),
        v.expand(2, -1, -1, -1),
        mask[None, None],
        scaling=0.125,
    )
    assert torch.allclose(pair[1], ref.transpose(1, 2)[0], atol=1e-5)
