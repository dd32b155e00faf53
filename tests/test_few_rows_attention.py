"""Fast tier: the C++ grouped attention of a step's few float32 query rows (``row_ops``'
``grouped_attention``, taken by ``gqa_attention.few_rows_attention``): SDPA's output to float32's
rounding at every shape a tree or a plain step gives it, each row's bits independent of the rows beside
it, and the forwards that keep SDPA."""

from __future__ import annotations

import pytest
import torch

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.model import ModelDrafter
from talon.engine.decode import run_to_end
from talon.models import gqa_attention, row_ops
from talon.models.gqa_attention import FEW_ROWS, few_rows_attention, use_gqa_attention
from talon.models.loaded import LoadedModel
from talon.models.stream_gemm import instruction_set
from tests.tiny import greedy_generate, prompt_ids, tiny_target

pytestmark = pytest.mark.skipif(not row_ops.available(), reason="no C++ compiler here")
HEAD_DIM = 64
NEG_INF = float("-inf")


def sdpa(q, k, v, mask, scale):
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=scale, enable_gqa=True)
    return out.transpose(1, 2).contiguous()


def tree_case(seed: int, rows: int, prefix: int, heads: int = 9, kv_heads: int = 3, batch: int = 1):
    """Query ``[batch, heads, rows, 64]`` (a transposed view, as a layer makes it), keys and values
    ``[batch, kv_heads, prefix + rows, 64]`` (slices of a longer cache buffer) and a tree's additive mask:
    every row sees the prefix, itself and a random earlier row's ancestors."""
    g = torch.Generator().manual_seed(seed)
    keys = prefix + rows
    q = (torch.randn(batch, rows, heads, HEAD_DIM, generator=g) * 2).transpose(1, 2)
    k, v = (torch.randn(batch, kv_heads, keys + 7, HEAD_DIM, generator=g)[:, :, :keys] for _ in range(2))
    sees = torch.zeros(rows, keys, dtype=torch.bool)
    sees[:, :prefix] = True
    for r in range(rows):
        parent = int(torch.randint(0, r, (1,), generator=g)) if r else None
        if parent is not None:
            sees[r] = sees[parent]
        sees[r, prefix + r] = True
    mask = torch.zeros(batch, 1, rows, keys).masked_fill_(~sees, NEG_INF)
    return q, k, v, mask


@pytest.mark.parametrize(
    "rows, prefix, heads, kv_heads, batch",
    [(1, 40, 9, 3, 1), (2, 5, 9, 3, 1), (7, 130, 9, 3, 1), (16, 200, 9, 3, 1), (33, 17, 9, 3, 2), (129, 300, 9, 3, 1)]
    + [(5, 64, 4, 4, 1), (12, 90, 8, 2, 1), (1, 1, 3, 1, 1)],
)
def test_the_kernel_gives_sdpa_output_to_float32_rounding(rows, prefix, heads, kv_heads, batch):
    q, k, v, mask = tree_case(rows * 31 + prefix, rows, prefix, heads, kv_heads, batch)
    got = row_ops.extension().grouped_attention(q, k, v, mask, HEAD_DIM**-0.5)
    want = sdpa(q, k, v, mask, HEAD_DIM**-0.5)
    assert got.shape == want.shape == (batch, rows, heads, HEAD_DIM)
    torch.testing.assert_close(got, want, rtol=2e-5, atol=2e-6)


@pytest.mark.parametrize("prefix", [120, 117])
def test_a_row_gets_the_same_bits_alone_as_among_a_trees_rows(prefix):
    """What makes a plain step and a tree's row agree: a row's output does not depend on its lane or on
    the other rows of the call, nor on whether its task took its scores with another's (40 rows of 3 query
    heads a key/value head: 8 tasks, in pairs; 160 or 157 keys, whole groups of 8 or not), nor on a zero
    added by the mask to a key it sees."""
    q, k, v, mask = tree_case(5, 40, prefix)
    attend = row_ops.extension().grouped_attention
    together = attend(q, k, v, mask, 0.125)
    for r in (0, 1, 15, 16, 17, 39):
        visible = mask[0, 0, r] == 0
        alone = attend(
            q[:, :, r : r + 1], k[:, :, visible], v[:, :, visible], torch.zeros(1, 1, 1, int(visible.sum())), 0.125
        )
        assert torch.equal(alone[0, 0], together[0, r]), r
    order = torch.randperm(40, generator=torch.Generator().manual_seed(2))
    shuffled = attend(q[:, :, order], k, v, mask[:, :, order], 0.125)
    assert torch.equal(shuffled[0], together[0, order])


def test_a_row_that_sees_no_key_gets_zeros_and_hidden_keys_weigh_nothing():
    q, k, v, mask = tree_case(9, 4, 10)
    mask[0, 0, 2] = NEG_INF
    v_changed = v.clone()
    v_changed[:, :, 10 + 3] = 1e30  # the last row's own key: hidden from rows 0-2
    out = row_ops.extension().grouped_attention(q, k, v_changed, mask, 0.125)
    assert torch.equal(out[0, 2], torch.zeros_like(out[0, 2]))
    torch.testing.assert_close(out[0, :2], sdpa(q, k, v, mask, 0.125)[0, :2], rtol=2e-5, atol=2e-6)


def test_forwards_it_does_not_take_return_none(monkeypatch):
    q, k, v, mask = tree_case(3, 8, 20)
    if instruction_set() != "AVX512":
        assert few_rows_attention(q, k, v, mask, 0.125) is None
        return
    got = few_rows_attention(q, k, v, mask, 0.125)
    torch.testing.assert_close(got, sdpa(q, k, v, mask, 0.125), rtol=2e-5, atol=2e-6)
    bool_mask = mask == 0
    assert torch.equal(few_rows_attention(q, k, v, bool_mask, 0.125), got)  # a bool mask is made additive
    wide = torch.cat([mask, torch.zeros(1, 1, 8, 5)], dim=-1)  # a mask longer than the keys: its first keys
    assert torch.equal(few_rows_attention(q, k, v, wide, 0.125), got)
    assert few_rows_attention(q.bfloat16(), k.bfloat16(), v.bfloat16(), mask.bfloat16(), 0.125) is None
    assert few_rows_attention(q[..., :32], k[..., :32], v[..., :32], mask, 0.125) is None  # head dim 32
    big = tree_case(4, FEW_ROWS + 1, 3)
    assert few_rows_attention(*big, 0.125) is None  # a prompt's prefill keeps SDPA
    monkeypatch.setenv("TALON_CPU_ATTENTION", "sdpa")
    assert few_rows_attention(q, k, v, mask, 0.125) is None
    monkeypatch.setenv("TALON_CPU_ATTENTION", "rows")
    monkeypatch.setenv("TALON_ROW_OPS", "0")
    assert few_rows_attention(q, k, v, mask, 0.125) is None


def test_an_unknown_setting_names_the_choices(monkeypatch):
    from talon.config import ConfigError

    monkeypatch.setenv("TALON_CPU_ATTENTION", "fast")
    with pytest.raises(ConfigError, match="rows, sdpa"):
        gqa_attention.cpu_attention_mode()


def head_dim_64_target(seed: int) -> LoadedModel:
    """A tiny Llama whose heads are 64 wide (4 query heads, 2 key/value heads), so its masked forwards
    take the C++ attention."""
    return tiny_target(seed, name="tiny-64", hidden_size=256, intermediate_size=256)


@pytest.mark.skipif(not instruction_set() == "AVX512", reason="the C++ attention runs on AVX-512 CPUs only")
def test_tree_decoding_through_it_equals_plain_decoding_and_stock_generate(monkeypatch):
    calls = []
    kernel = row_ops.extension().grouped_attention

    def counting(*args):
        calls.append(args[0].shape[2])
        return kernel(*args)

    stock, ours = head_dim_64_target(3), head_dim_64_target(3)
    assert use_gqa_attention(ours.model)
    monkeypatch.setattr(gqa_attention, "_rows_kernel", lambda *settings: counting)
    dec = DecodeConfig(max_new_tokens=24)
    for seed in (4, 5):
        ids = prompt_ids(seed)
        expected = greedy_generate(stock, ids, 24)
        plain = run_to_end(ours, None, TreeConfig(method="ar"), dec, prompt_ids=ids)
        tree = run_to_end(ours, ModelDrafter(ours), TreeConfig(method="talon", budget=12), dec, prompt_ids=ids)
        assert plain.output_ids == expected == tree.output_ids, seed
        assert len(tree.steps) < len(plain.steps)
    assert 1 in calls and max(calls) > 1  # plain steps and trees both took it
