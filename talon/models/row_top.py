"""Each row's best entries of float32 scores on the CPU in one C++ call (``csrc/row_ops.cpp``): the token
a verification picks (``row_argmax``, torch.argmax's answer) and the screened LM head's best candidates
(``row_topk``); and the normalisers of a verification's node probabilities (``row_logsumexp``).

PyTorch's argmax and top-k walk a row with an index beside each value, one element at a time: on the
2-core AVX-512 Xeon (family 6 model 207) about 2 ms for 32 rows of the embedded model's 49,152-token
vocabulary, 0.1 ms for one, where the amax of the same rows takes 0.18 ms.  At 32 rows that was about
3 % of a tree verification.  The C++ compares a block of a row at a time with the best value so far (a
loop built for AVX-512, AVX2 or neither, chosen when the module loads) and walks only the blocks that
beat it: argmax 0.21 ms at 32 rows and 8 us at one, the top 16 0.41 ms against 2.6
(docs/benchmarks.md, run 54).

``row_logsumexp`` reads each asked row where it lies, twice (its maximum, then the sum of exponentials),
where PyTorch's logsumexp of the same rows first gathers them into a copy and then walks them four times.
``row_dots`` gives the screened LM head's exact logits of a few (row, token) pairs, each pair's two rows
read where they lie, where PyTorch's ``(hidden[rows] * weight[tokens]).sum(-1)`` first copies both gathers
and their products.  ``native_rows`` says whether the C++ takes a matrix of scores (the screened LM head's
search of a flat row, ``lm_head.ScreenedScores``, asks it too).

``row_argmax`` returns exactly torch.argmax's indices (the first largest value; a NaN counts as the
largest).  ``row_topk`` (and ``row_topk_widened``, which also reads bfloat16 scores, each row widened to
float32 as it is read, and gives float32 values) returns torch.topk's values, equal values in index
order (torch.topk leaves the order of ties open).  Both take the C++ where the extension is built
(``row_ops.extension``) and ``$TALON_ROW_OPS`` is on; other dtypes, devices, shapes and tensors that need
a gradient take PyTorch's.
"""

from __future__ import annotations

import torch

from . import row_ops


def native_rows(scores: torch.Tensor) -> bool:
    """Whether the C++ takes ``scores``: float32 or bfloat16 ``[rows, vocab]`` on the CPU, each row
    contiguous, no gradient wanted, and ``active()``."""
    return _native(scores, SCORE_DTYPES) and scores.stride(1) == 1


SCORE_DTYPES = (torch.float32, torch.bfloat16)
"""What the top-k, the log-sum-exp and the flat rows' search read: float32, or the screened LM head's
bfloat16 scores, each row widened to float32 (exactly) as it is read."""


def _native(scores: torch.Tensor, dtypes: tuple[torch.dtype, ...] = (torch.float32,)) -> bool:
    return (
        scores.dtype in dtypes
        and scores.device.type == "cpu"
        and scores.dim() == 2
        and scores.shape[1] > 0
        and not (torch.is_grad_enabled() and scores.requires_grad)
        and active()
    )


def active() -> bool:
    """Whether the rows' picks run in C++ here (``$TALON_ROW_OPS`` on and the extension built)."""
    return row_ops.row_ops_setting() and row_ops.available()


def row_argmax(scores: torch.Tensor) -> torch.Tensor:
    """``scores.argmax(dim=-1)``: int64 ``[rows]`` for ``scores`` ``[rows, vocab]``."""
    if _native(scores):
        return row_ops.extension().row_argmax(scores)
    return scores.argmax(dim=-1)


def row_topk(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``(values, ids)`` ``[rows, k]``: each row of ``scores`` ``[rows, vocab]``'s ``k`` largest
    (``1 <= k <= vocab``), best first, equal values in index order where the C++ serves."""
    if _native(scores) and 1 <= k <= scores.shape[1]:
        return row_ops.extension().row_topk(scores, k)
    top = scores.topk(k, dim=-1)
    return top.values, top.indices


def row_topk_widened(scores: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    """``row_topk`` of float32 or bfloat16 ``scores`` with the values as float32 (the screened LM head's
    bfloat16 scores: the C++ widens each row as it reads it)."""
    if _native(scores, SCORE_DTYPES) and 1 <= k <= scores.shape[1]:
        return row_ops.extension().row_topk(scores, k)
    values, ids = row_topk(scores, k)
    return values.float(), ids


def row_logsumexp(scores: torch.Tensor, rows: torch.Tensor | None = None, scale: float = 1.0) -> torch.Tensor:
    """``torch.logsumexp(scores[rows] * scale, dim=-1)``: float32 ``[n]`` for ``scores`` ``[R, vocab]`` and
    int64 ``rows`` ``[n]`` on ``scores``' device (None: every row, without a copy); within float32 rounding
    of PyTorch's answer where the C++ serves (bfloat16 scores: of the answer for them widened to float32)."""
    if _native(scores, SCORE_DTYPES):
        every = torch.arange(scores.shape[0]) if rows is None else rows
        return row_ops.extension().row_logsumexp(scores, every, scale)
    picked = scores if rows is None else scores[rows]
    return torch.logsumexp(picked if scale == 1.0 else picked * scale, dim=-1)


def row_dots(hidden: torch.Tensor, rows: torch.Tensor, weight: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
    """``(hidden[rows] * weight[tokens]).sum(-1)``: float32 ``[n]`` for ``hidden`` ``[R, H]``, ``weight``
    ``[V, H]`` and int64 ``rows`` / ``tokens`` ``[n]``; where the C++ serves, its own order of each sum
    (within float32's bound of PyTorch's; a pair's bits do not depend on the other pairs)."""
    if _native(hidden) and _native(weight) and hidden.shape[1] == weight.shape[1] and rows.device.type == "cpu":
        return row_ops.extension().row_dots(hidden, rows, weight, tokens)
    return (hidden[rows] * weight[tokens]).sum(dim=-1)
