"""Fast tier: each row's argmax, top-k and log-sum-exp in one C++ call (``talon.models.row_top``):
torch.argmax's indices and torch.topk's values on random, tied, infinite and NaN rows, block edges
included, torch.logsumexp's values within float32 rounding, and PyTorch's own answer wherever the C++
does not serve."""

from __future__ import annotations

import pytest
import torch

from talon.models import row_ops, row_top

pytestmark = pytest.mark.skipif(not row_ops.available(), reason="no C++ compiler here")

BLOCK = 64  # csrc/row_ops.cpp's kBlock: a row is compared with the best so far this many at a time


def _tricky_rows(vocab: int) -> torch.Tensor:
    """Rows whose answer a careless scan gets wrong: ties (first, in one block, across a block edge),
    the maximum at either end or just past a block edge, all -inf, +inf, signed zeros."""
    g = torch.Generator().manual_seed(vocab)
    rows = [torch.randn(vocab, generator=g) for _ in range(4)]
    rows.append(torch.zeros(vocab))  # every entry ties
    tie = torch.randn(vocab, generator=g)
    tie[[i % vocab for i in (3, BLOCK + 1, vocab - 1)]] = 9.0  # the first of three ties, in different blocks
    rows.append(tie)
    for at in (0, BLOCK - 1, BLOCK, BLOCK + 1, vocab - 1):
        row = torch.randn(vocab, generator=g)
        row[at % vocab] = 7.0
        rows.append(row)
    rows.append(torch.full((vocab,), -torch.inf))
    inf = torch.randn(vocab, generator=g)
    inf[[5 % vocab, max(vocab - 2, 0)]] = torch.inf
    rows.append(inf)
    zeros = -torch.rand(vocab, generator=g) - 1
    zeros[[2 % vocab, 9 % vocab]] = torch.tensor([-0.0, 0.0])  # equal: the first wins
    rows.append(zeros)
    rising = torch.arange(vocab, dtype=torch.float32)  # a new best in every block
    rows.append(rising)
    return torch.stack(rows)


@pytest.mark.parametrize("vocab", [1, 17, BLOCK, BLOCK + 1, 3 * BLOCK + 5, 49152])
def test_argmax_gives_torch_argmax_indices(vocab: int) -> None:
    x = _tricky_rows(vocab)
    assert torch.equal(row_top.row_argmax(x), x.argmax(dim=-1))


@pytest.mark.parametrize("at", [0, 1, BLOCK - 1, BLOCK, 200])
def test_argmax_of_a_row_with_nan_is_the_first_nan_as_torch_gives(at: int) -> None:
    x = torch.randn(3, 257)
    x[0, at] = torch.nan
    x[0, at + 20] = torch.nan
    x[1, at] = torch.nan
    x[1, 0] = 50.0  # a larger value before the NaN
    assert torch.equal(row_top.row_argmax(x), x.argmax(dim=-1))
    assert row_top.row_argmax(x)[:2].tolist() == [at, at]


@pytest.mark.parametrize("rows", [1, 4, 33])
def test_argmax_of_many_rows_and_strided_rows(rows: int) -> None:
    torch.manual_seed(rows)
    wide = torch.randn(rows, 2 * 1000)
    x = wide[:, ::2]  # not contiguous
    assert torch.equal(row_top.row_argmax(x), x.argmax(dim=-1))
    assert row_top.row_argmax(torch.empty(0, 5)).shape == (0,)


@pytest.mark.parametrize("k", [1, 2, 16])
@pytest.mark.parametrize("vocab", [16, BLOCK + 3, 49152])
def test_topk_gives_torch_topk_values_best_first(k: int, vocab: int) -> None:
    x = _tricky_rows(vocab)
    values, ids = row_top.row_topk(x, k)
    expected = x.topk(k, dim=-1).values
    assert torch.equal(values, expected)
    assert torch.equal(x.gather(1, ids), values)  # the ids hold those values
    assert all(len(set(r)) == k for r in ids.tolist())  # k different entries


def test_topk_keeps_equal_values_in_index_order() -> None:
    x = torch.zeros(2, 300)
    x[0, [250, 7, 130, 64]] = 3.0
    x[1] = -torch.inf
    x[1, 299] = 1.0
    values, ids = row_top.row_topk(x, 6)
    assert ids[0].tolist() == [7, 64, 130, 250, 0, 1]
    assert values[0].tolist() == [3.0] * 4 + [0.0] * 2
    assert ids[1].tolist() == [299, 0, 1, 2, 3, 4]


def test_topk_of_a_row_with_nan_is_torchs() -> None:
    x = torch.randn(3, 500)
    x[1, 321] = torch.nan
    values, ids = row_top.row_topk(x, 4)
    top = x.topk(4, dim=-1)
    assert torch.equal(ids, top.indices)  # rows without ties: the same ids; the NaN row: torch's own
    torch.testing.assert_close(values, top.values, rtol=0, atol=0, equal_nan=True)
    assert ids[1, 0] == 321


def test_what_the_cpp_does_not_take_goes_to_torch(monkeypatch) -> None:
    calls = []
    real = row_ops.extension()

    class Spy:
        def row_argmax(self, x):
            calls.append("argmax")
            return real.row_argmax(x)

        def row_topk(self, x, k):
            calls.append("topk")
            return real.row_topk(x, k)

        def row_logsumexp(self, x, rows, scale):
            calls.append("logsumexp")
            return real.row_logsumexp(x, rows, scale)

    monkeypatch.setattr(row_ops, "extension", lambda: Spy())
    x = torch.randn(3, 100)
    for other in (x.double(), x.bfloat16(), x[0], x.clone().requires_grad_()):
        assert torch.equal(row_top.row_argmax(other), other.argmax(dim=-1))
        assert torch.equal(row_top.row_topk(other, 3)[0], other.topk(3, dim=-1).values)
        if other.dim() == 2 and other.dtype != torch.bfloat16:  # bfloat16: the C++ widens it (below)
            assert torch.equal(row_top.row_logsumexp(other), other.logsumexp(dim=-1))
    assert calls == []
    row_top.row_logsumexp(x.bfloat16()), row_top.row_topk_widened(x.bfloat16(), 3)
    assert calls == ["logsumexp", "topk"]
    calls.clear()
    monkeypatch.setenv(row_ops.ROW_OPS_ENV, "0")
    row_top.row_argmax(x), row_top.row_topk(x, 3)
    assert calls == [] and not row_top.active()
    monkeypatch.setenv(row_ops.ROW_OPS_ENV, "1")
    row_top.row_argmax(x), row_top.row_topk(x, 3), row_top.row_logsumexp(x)
    assert calls == ["argmax", "topk", "logsumexp"]


@pytest.mark.parametrize("vocab", [1, 15, 16, 17, 255, 256, 257, 49152])
@pytest.mark.parametrize("scale", [1.0, 1 / 0.7, 3.0])
def test_logsumexp_is_torchs_within_float32_rounding(vocab: int, scale: float) -> None:
    g = torch.Generator().manual_seed(vocab)
    x = torch.randn(6, vocab, generator=g) * 5
    x[1] -= 300.0  # every exponential of the row underflows unless its maximum is taken out first
    x[2] += 300.0
    x[3, -1] = 80.0  # the maximum in the tail past the last whole vector
    rows = torch.tensor([5, 0, 3, 3, 1, 2])  # any order, repeats
    want = torch.logsumexp(x[rows].double() * scale, dim=-1)
    got = row_top.row_logsumexp(x, rows, scale)
    assert got.dtype == torch.float32 and got.shape == (6,)
    torch.testing.assert_close(got.double(), want, rtol=3e-7, atol=0)
    torch.testing.assert_close(
        row_top.row_logsumexp(x, None, scale).double(), torch.logsumexp(x.double() * scale, dim=-1), rtol=3e-7, atol=0
    )


def test_logsumexp_of_rows_with_nan_or_infinity_is_torchs() -> None:
    x = torch.randn(5, 300)
    x[0, 17] = torch.nan
    x[1, 299] = torch.inf
    x[2] = -torch.inf
    x[3, 5] = -torch.inf  # one hidden entry: an ordinary row
    got = row_top.row_logsumexp(x, torch.tensor([0, 1, 2, 3, 4]))
    torch.testing.assert_close(got, x.logsumexp(dim=-1), equal_nan=True)
    assert got[0].isnan() and got[1] == torch.inf and got[2] == -torch.inf


def test_logsumexp_reads_the_rows_where_they_lie() -> None:
    wide = torch.randn(4, 600)
    x = wide[:, 50:350]  # rows 600 apart, each contiguous
    torch.testing.assert_close(
        row_top.row_logsumexp(x, torch.tensor([2, 0])), x[[2, 0]].logsumexp(dim=-1), rtol=3e-7, atol=0
    )
    with pytest.raises(RuntimeError, match="outside"):
        row_top.row_logsumexp(x, torch.tensor([4]))


@pytest.mark.parametrize("width", [1, 15, 16, 17, 64, 577])
def test_dots_are_within_float32s_bound_and_each_pairs_bits_stand_alone(width: int) -> None:
    """The screened head's exact logits: every pair within float32's bound for a sum of ``width`` products
    of the float64 dot, and a pair's bits the same alone, among others, and from rows that lie apart."""
    g = torch.Generator().manual_seed(width)
    hidden, weight = torch.randn(7, width, generator=g) * 4, torch.randn(300, width, generator=g) * 0.05
    rows = torch.randint(0, 7, (150,), generator=g)
    tokens = torch.randint(0, 300, (150,), generator=g)
    got = row_top.row_dots(hidden, rows, weight, tokens)
    exact = (hidden[rows].double() * weight[tokens].double()).sum(-1)
    bound = width * 2.0**-23 * (hidden[rows].double().abs() * weight[tokens].double().abs()).sum(-1)
    assert got.dtype == torch.float32 and got.shape == (150,)
    assert ((got.double() - exact).abs() <= bound).all()
    for i in (0, 41, 149):
        assert torch.equal(row_top.row_dots(hidden, rows[i : i + 1], weight, tokens[i : i + 1]), got[i : i + 1])
    apart = torch.zeros(7, width + 9)
    apart[:, 3 : 3 + width] = hidden
    assert torch.equal(row_top.row_dots(apart[:, 3 : 3 + width], rows, weight, tokens), got)
    with pytest.raises(RuntimeError, match="outside"):
        row_top.row_dots(hidden, torch.tensor([7]), weight, torch.tensor([0]))


def test_dots_the_cpp_does_not_take_are_torchs(monkeypatch) -> None:
    class Refuse:
        def row_dots(self, *args):
            raise AssertionError("the C++ was asked")

    monkeypatch.setattr(row_ops, "extension", lambda: Refuse())
    hidden, weight = torch.randn(3, 20), torch.randn(5, 20)
    rows, tokens = torch.tensor([0, 2]), torch.tensor([4, 1])
    for h, w in ((hidden.double(), weight.double()), (hidden.clone().requires_grad_(), weight)):
        assert torch.equal(row_top.row_dots(h, rows, w, tokens), (h[rows] * w[tokens]).sum(-1))
    with pytest.raises(AssertionError, match="asked"):
        row_top.row_dots(hidden, rows, weight, tokens)


@pytest.mark.parametrize("vocab", [1, 17, 257, 4099])
def test_bfloat16_rows_give_the_answers_of_the_rows_widened(vocab: int) -> None:
    """The screened LM head's bfloat16 scores are widened row by row as the C++ reads them: the top-k,
    the log-sum-exp and a flat row's search give exactly what they give on the matrix widened first."""
    rows = _tricky_rows(vocab).bfloat16()
    wide = rows.float()
    k = min(vocab, 5)
    got, want = row_top.row_topk_widened(rows, k), row_top.row_topk(wide, k)
    assert got[0].dtype == torch.float32 and torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    asked = torch.tensor([3, 0, 3, len(rows) - 1])
    for scale in (1.0, 1 / 0.7):
        assert torch.equal(row_top.row_logsumexp(rows, asked, scale), row_top.row_logsumexp(wide, asked, scale))
    g = torch.Generator().manual_seed(vocab)
    scores = (torch.randn(4, vocab, generator=g) * 3).bfloat16()
    flat, cut, floor = torch.tensor([2, 0]), torch.tensor([1.0, 2.0]), torch.tensor([1.5, 2.5])
    radius, norms = torch.rand(4, generator=g), torch.rand(vocab, generator=g)
    reach = row_ops.extension().row_reaching
    want = reach(scores.float(), scores.float(), flat, cut, floor, radius, norms, 2**-8, 1.0)
    for s, a in ((scores, scores), (scores.float(), scores), (scores, scores.float())):
        got = reach(s, a, flat, cut, floor, radius, norms, 2**-8, 1.0)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1])
    assert vocab < 257 or want[0].numel() > 0  # something was found
