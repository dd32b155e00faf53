"""The target's next token without a float32 LM head over the whole vocabulary.

Verification needs, per headed row, the target's token (the argmax of the logits, or at temperature > 0
of the tempered logits plus Gumbel noise) and the probability of each node's token.  On the CPU the LM
head is a ``[vocab, H]`` matrix (SmolLM2-135M: 49,152 x 576, 113 MB in float32) read at every step:
about 4 ms of a 40 ms plain step on the 2-core AVX-512 machine.  ``ScreenedHead`` scores every token
with a bfloat16 copy of the matrix (native where the CPU has AVX512-BF16), then recomputes in float32
only the tokens that could still be the answer, so the token picked is the float32 argmax:

- bfloat16 rounds each of ``h`` and ``w`` to 8 significant bits (relative error at most ``u = 2^-8``),
  the products add up in float32 to ``pre_j`` with ``|pre_j - exact_j| <= (2u + u^2 + 2K 2^-24) *
  sum_i |h_i w_ji| <= bound * ||h|| * ||w_j||`` (Cauchy-Schwarz; ``K`` the hidden size, the float32
  sums of either computation), and oneDNN rounds ``pre_j`` to bfloat16 again on output, so
  ``|approx_j - pre_j| <= u / (1 - u) * |approx_j|``.  A token's error is the sum of the two
  (``ScreenedScores.error``).  With ``floor`` the approximate best token's score less its error, no
  token whose score plus its error stays below ``floor`` can be the float32 argmax; the rest are
  recomputed in float32.  They are looked for among the row's ``TOP`` best scores, and over the whole
  vocabulary only when a token below the ``TOP``-th could itself reach ``floor`` (a flat row).  On the
  embedded model a row kept 1 token at the median and at most 25; the bfloat16 argmax alone differed
  from float32's at 1.3 % of 234 decoding steps.
- At temperature > 0 the same holds for ``logit / T + noise`` with the error divided by ``T``.
- A node's probability is its float32 logit over a normaliser in which the row's ``TOP`` best tokens
  are float32 and the rest bfloat16 (within 1.2e-3 of float32's on the embedded model; with a
  bfloat16 normaliser a peaked row's probabilities were up to 0.15 off).

Head only, on the 2-core Zen 4 (median of 40 interleaved rounds, pick and probabilities): 3.1 ms
against 4.8 for float32 at 1 row, 3.8 / 5.3 at 8, 6.7 / 8.6 at 20, 9.6 / 11.9 at 32 (before the output's
rounding entered the bound, which costs a pick 0.05-0.15 ms more).  Plain decoding
takes the same path as verification, so both pick their tokens the same way; the float32 logits of the
recomputed tokens differ from a float32 matrix product's in the last bits, as any two float32 kernels'
do (greedy decoding is checked against transformers' ``generate()``).  ``screen_for`` gives a model its
screen where its logits are its LM head's output (no logit scaling, soft-capping or bias), oneDNN has
bfloat16 linears and the picks of 1 and 8 rows measure faster screened (kept for the machine); every
other model takes the float32 head (``FullScores``).  Read-only after construction.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Protocol

import torch

from . import device, kernel_store, row_ops, row_top, stream_gemm
from .cpu_linear import MARGIN, fastest_each, onednn_linear_works
from .loaded import LoadedModel
from .row_top import row_argmax, row_logsumexp, row_topk_widened

BF16_UNIT = 2.0**-8
"""Largest relative error of rounding a float32 to bfloat16 (8 significant bits, round to nearest)."""
FLOAT32_UNIT = 2.0**-24
TOP = 16
"""Best tokens per row (by the bfloat16 scores) looked at first: the pick's candidates are among them
unless the row is flat, and the normaliser takes them in float32."""


class RowScores(Protocol):
    """The target's next-token scores for some hidden-state rows (``rows`` of them, on ``device``)."""

    rows: int
    device: torch.device

    def pick(self, temperature: float, noise: torch.Tensor | None) -> list[int]:
        """Per row, the target's token: the argmax of the logits (``temperature == 0``) or of
        ``logits / temperature + noise`` (``noise``: float32 ``[rows, vocab]``); ties to the lowest id."""

    def token_probs(self, rows: Sequence[int], tokens: Sequence[int], temperature: float) -> torch.Tensor:
        """Float32 ``[n]``: the probability of ``tokens[i]`` in row ``rows[i]`` (tempered when
        ``temperature > 0``, untempered at 0); a normaliser is computed only for the rows asked about."""


class FullScores:
    """``RowScores`` over float32 logits ``[rows, vocab]`` of the whole vocabulary."""

    def __init__(self, logits: torch.Tensor) -> None:
        self.logits = logits
        self.rows, self.device = logits.shape[0], logits.device

    def pick(self, temperature: float, noise: torch.Tensor | None) -> list[int]:
        scores = self.logits if temperature == 0 else self.logits / temperature + noise
        return row_argmax(scores).tolist()

    def token_probs(self, rows: Sequence[int], tokens: Sequence[int], temperature: float) -> torch.Tensor:
        needed, rows_at, tokens_at, at = _row_index(rows, tokens, self.device)
        scale = 1.0 / temperature if temperature > 0 else 1.0
        log_norm = row_logsumexp(self.logits, _asked(self.logits, needed), scale)
        return (self.logits[rows_at, tokens_at] * scale - log_norm[at]).exp()


class ScreenedHead:
    """A float32 LM head ``weight`` ``[vocab, H]`` (shared, not copied) with a packed bfloat16 copy for
    screening and the rows' norms for the error bound.  ``scores(hidden)`` gives ``RowScores``."""

    def __init__(self, weight: torch.Tensor, native: bool = True) -> None:
        hidden = weight.shape[1]
        self.weight = weight.detach()  # the exact logits' dots read it in place, with or without autograd
        self.native = native
        """Whether the bfloat16 product runs on oneDNN's packed kernel (AVX512-BF16); otherwise it is
        computed in float32 from the bfloat16-rounded operands, the same arithmetic slower (tests)."""
        rounded = weight.detach().bfloat16()
        self.packed = torch.ops.mkldnn._reorder_linear_weight(rounded, 64) if native else rounded.float()
        self.row_norms = weight.detach().norm(dim=1)  # [vocab]
        self.max_norm = float(self.row_norms.max())
        self.bound = (2 * BF16_UNIT + BF16_UNIT**2 + 2 * hidden * FLOAT32_UNIT) * 1.01
        """The float32 sum of the bfloat16 products is within ``bound * ||h|| * ||w_j||`` of token j's
        float32 logit (with 1 % to spare)."""
        self.output_unit = BF16_UNIT / (1 - BF16_UNIT) * 1.01
        """That sum, rounded to bfloat16 as the product's output, is within ``output_unit * |approx_j|`` of
        it (with 1 % to spare)."""

    @property
    def name(self) -> str:
        """What the curve key and the benchmark's meta say about the LM head."""
        return "bfloat16 screen, float32 pick" if self.native else "bfloat16 screen (emulated), float32 pick"

    @classmethod
    def for_model(cls, model: torch.nn.Module) -> ScreenedHead | None:
        """The screened head of a float32 CPU causal LM whose logits are its LM head's output (no logit
        scale, no soft-capping, no bias) on a CPU with native bfloat16 linears; None otherwise."""
        head = model.get_output_embeddings()
        weight = getattr(head, "weight", None)
        config = model.config
        scale = getattr(config, "logit_scale", None)
        if (
            weight is None
            or weight.device.type != "cpu"
            or weight.dtype != torch.float32
            or getattr(head, "bias", None) is not None
            or (isinstance(scale, (int, float)) and scale != 1)
            or getattr(config, "final_logit_softcapping", None)
            or not onednn_linear_works(torch.bfloat16)
        ):
            return None
        return cls(weight)

    def scores(self, hidden: torch.Tensor) -> ScreenedScores:
        """``hidden``: float32 ``[rows, H]`` last hidden states (after the final norm)."""
        hidden = hidden.float().contiguous()
        if self.native:
            approx = torch.ops.mkldnn._linear_pointwise(hidden.bfloat16(), self.packed, None, "none", [], "")
        else:  # the output rounded to bfloat16 as oneDNN's is
            approx = (hidden.bfloat16().float() @ self.packed.T).bfloat16()
        # kept bfloat16 where the C++ reads it so (each row widened as it is read); else widened here
        approx = approx if row_top.native_rows(approx) else approx.float()
        return ScreenedScores(self, hidden, approx, self.bound * hidden.norm(dim=1))


class ScreenedScores:
    """``RowScores`` from a ``ScreenedHead``: bfloat16 scores ``approx`` ``[rows, vocab]`` (bfloat16, or
    widened to float32 where the C++ does not serve; every use widens them first, exactly), each within
    ``radius[r] * row_norms[j] + output_unit * |approx[r, j]|`` of the float32 logit (``error``)."""

    def __init__(self, head: ScreenedHead, hidden: torch.Tensor, approx: torch.Tensor, radius: torch.Tensor) -> None:
        self.head, self.hidden, self.approx, self.radius = head, hidden, approx, radius
        self.rows, self.device = hidden.shape[0], hidden.device
        self._approx_top: tuple[torch.Tensor, torch.Tensor] | None = None

    def exact(self, rows: torch.Tensor, tokens: torch.Tensor) -> torch.Tensor:
        """Float32 logits ``[n]`` of ``tokens[i]`` in row ``rows[i]`` (``row_top.row_dots``)."""
        return row_top.row_dots(self.hidden, rows, self.head.weight, tokens)

    def _top(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``scores``' ``TOP`` best (values and ids, best first; ``row_topk``), kept for the untempered
        scores, which the pick and the normalisers of a greedy step both use."""
        if scores is self.approx and self._approx_top is not None:
            return self._approx_top
        top = row_topk_widened(scores, min(TOP, scores.shape[1]))
        if scores is self.approx:
            self._approx_top = top
        return top

    def error(self, rows: torch.Tensor, tokens: torch.Tensor, scale: float) -> torch.Tensor:
        """How far ``scale * approx[rows, tokens]`` can be from ``scale`` times those float32 logits
        (``rows`` and ``tokens``: index tensors that broadcast together)."""
        head = self.head
        approx = self.approx[rows, tokens].float()
        return scale * (self.radius[rows] * head.row_norms[tokens] + head.output_unit * approx.abs())

    def pick(self, temperature: float, noise: torch.Tensor | None) -> list[int]:
        scale = 1.0 if temperature == 0 else 1.0 / temperature
        scores = self.approx if temperature == 0 else self.approx.float() * scale + noise
        values, ids = self._top(scores)
        error = self.error(torch.arange(self.rows)[:, None], ids, scale)  # [rows, TOP]
        floor = values[:, 0] - error[:, 0]  # the best token's float32 score is at least this
        # A token below the TOP best scores at most the TOP-th; its output error grows with |approx|:
        # greedy, at most the TOP-th's (a score plus its error rises with the score); sampled, at most
        # the row's largest (the noise reorders the tokens).
        if temperature == 0:
            largest = values[:, -1].abs()
        else:
            low, high = torch.aminmax(self.approx, dim=1)
            largest = torch.maximum(low.abs(), high.abs()).float()
        below = scale * (self.radius * self.head.max_norm + self.head.output_unit * largest)
        # Where no token below the TOP best can reach the floor, the candidates are among those TOP.
        inside = values[:, -1] + below < floor
        keep = (values + error >= floor[:, None]) & inside[:, None]
        rows, cols = torch.nonzero(keep, as_tuple=True)
        tokens = ids[rows, cols]
        outside = torch.nonzero(~inside).flatten()
        if outside.numel():  # a flat row: every token that can reach its floor
            flat_floor = floor[outside]
            # First those whose score with the row's largest error reaches it (one comparison a token; for
            # greedy the output error's own |approx|, the score plus it rising with the score), then
            # each of those with its own error.
            if temperature == 0:
                y = flat_floor - self.radius[outside] * self.head.max_norm
                unit = self.head.output_unit
                cut = torch.where(y >= 0, y / (1 + unit), y / (1 - unit))
            else:
                cut = flat_floor - below[outside]
            at, more_tokens = self._reaching(scores, outside, cut, flat_floor, scale)
            rows, tokens = torch.cat([rows, at]), torch.cat([tokens, more_tokens])
        exact = self.exact(rows, tokens) * scale
        if temperature > 0:
            exact = exact + noise[rows, tokens]
        top = torch.full((self.rows,), -math.inf).scatter_reduce(0, rows, exact, "amax")
        vocab = self.approx.shape[1]
        first = torch.where(exact == top[rows], tokens, vocab)  # ties: the lowest id, as argmax
        return torch.full((self.rows,), vocab).scatter_reduce(0, rows, first, "amin").tolist()

    def _reaching(
        self, scores: torch.Tensor, flat: torch.Tensor, cut: torch.Tensor, floor: torch.Tensor, scale: float
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``(rows, tokens)``: in the rows ``flat`` of ``scores`` (``[rows, vocab]``: ``approx`` or its
        tempered, noisy scores), every token whose score reaches the row's ``cut`` and whose score plus its
        error reaches the row's ``floor``, row by row in token order (C++ where ``row_top.native_rows``:
        one pass a row, the same tokens)."""
        head = self.head
        if row_top.native_rows(scores):
            return row_ops.extension().row_reaching(
                scores, self.approx, flat, cut, floor, self.radius, head.row_norms, head.output_unit, scale
            )
        flat_scores = scores[flat]
        more_rows, more_tokens = torch.nonzero(flat_scores >= cut[:, None], as_tuple=True)
        at = flat[more_rows]
        reached = flat_scores[more_rows, more_tokens] + self.error(at, more_tokens, scale) >= floor[more_rows]
        return at[reached], more_tokens[reached]

    def token_probs(self, rows: Sequence[int], tokens: Sequence[int], temperature: float) -> torch.Tensor:
        scale = 1.0 if temperature == 0 else 1.0 / temperature
        needed, rows_at, tokens_at, at = _row_index(rows, tokens, self.device)
        values, top = self._top(self.approx)  # [rows, k], best first: scaling keeps the order
        values, top = values[needed] * scale, top[needed]
        exact_top = self.exact(needed[:, None].expand_as(top).flatten(), top.flatten()).view_as(top) * scale
        # Mass relative to the best bfloat16 score: everything less the best k as bfloat16 has them (the
        # tail; the difference in float64, clamped at 0 where rounding leaves nothing), plus the best k in
        # float32.
        best = values[:, :1].double()
        everything = (row_logsumexp(self.approx, _asked(self.approx, needed), scale)[:, None].double() - best).exp()
        tail = everything - (values.double() - best).exp().sum(dim=1, keepdim=True)
        mass = tail.clamp_min(0.0) + (exact_top.double() - best).exp().sum(dim=1, keepdim=True)
        log_norm = (best + mass.log()).flatten().float()
        return (self.exact(rows_at, tokens_at) * scale - log_norm[at]).exp()


def _row_index(
    rows: Sequence[int], tokens: Sequence[int], device: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """``(needed, rows, tokens, at)`` on ``device``: the distinct rows asked about (sorted), the rows and
    tokens as tensors, and each entry's place among ``needed``; found on the host, so a GPU waits for no
    ``unique``, in two copies."""
    needed = sorted(set(rows))
    place = {row: k for k, row in enumerate(needed)}
    rows_tokens_at = torch.tensor([list(rows), list(tokens), [place[r] for r in rows]], device=device)
    return torch.tensor(needed, device=device), *rows_tokens_at.unbind(0)


def _asked(matrix: torch.Tensor, rows: torch.Tensor) -> torch.Tensor | None:
    """Sorted distinct ``rows`` of ``matrix``, or None when they are all of its rows (``row_logsumexp``
    then reads the matrix without gathering it)."""
    return None if rows.numel() == matrix.shape[0] else rows


def row_scores(lm: LoadedModel, hidden: torch.Tensor) -> RowScores:
    """The target's next-token scores of ``hidden`` ``[rows, H]``: screened where ``lm`` has a screen,
    else over the float32 logits of the whole vocabulary."""
    if lm.screen is not None:
        return lm.screen.scores(hidden)
    return FullScores(lm.logits(hidden))


SCREEN_ROWS = (1, 8)
"""Rows the screen is timed at against the float32 head, the two timings summed: a plain step's one row
(its pick) and a tree's typical headed rows (their picks and node probabilities)."""
SCREEN_REPS = 25
"""Timings of each head (the least kept): about 0.3 s, long enough for ``device.OtherWork`` to tell
whether the machine was quiet, so the choice can be kept."""


def screen_for(model: torch.nn.Module) -> ScreenedHead | None:
    """``model``'s screened head when it can have one (``ScreenedHead.for_model``) and, at the rows of
    ``SCREEN_ROWS``, it takes at most ``MARGIN`` of the float32 head's time (least of ``SCREEN_REPS``
    timings each, interleaved): a CPU whose oneDNN emulates bfloat16 keeps the float32 head.  None
    otherwise.  The two are often within a few per cent of each other, so a choice timed anew at every
    load went either way on one machine; like the linears' kernel choices it is kept for the machine
    (``kernel_store``) when timed on a quiet one, and later loads read it."""
    screen = ScreenedHead.for_model(model)
    if screen is None:
        return None
    head = model.get_output_embeddings()
    # what the timing depends on: the head's shape and kernel (its weights as codes or float32: the float32
    # head reads 113 MB, the coded one 32 MB), the rows timed, the threads, the C++ picks
    packed = getattr(head, "packed", None)
    head_kernel = (
        type(head).__name__,
        getattr(packed, "kernel", None),
        getattr(packed, "codes", False),
        getattr(head, "plain_rows", None),
    )
    timed = (
        "screened LM head",
        tuple(screen.weight.shape),
        head_kernel,
        SCREEN_ROWS,
        torch.get_num_threads(),
        row_top.active(),
    )
    key = kernel_store.machine_key(timed, f"{stream_gemm.source_digest()} {row_ops.source_digest()}")
    kept = (kernel_store.cached_record(key) or {}).get("screen")
    if isinstance(kept, bool):
        return screen if kept else None
    hidden = [torch.randn(rows, screen.weight.shape[1]) * 4 for rows in SCREEN_ROWS]

    def use(scores: RowScores) -> None:
        scores.pick(0.0, None)
        if scores.rows > 1:
            scores.token_probs(range(scores.rows - 1), [0] * (scores.rows - 1), 0.0)

    with torch.inference_mode(), device.OtherWork() as others:
        full, screened = fastest_each(
            [lambda: [use(FullScores(head(h))) for h in hidden], lambda: [use(screen.scores(h)) for h in hidden]],
            reps=SCREEN_REPS,
        )
    chosen = screened <= MARGIN * full
    if others.quiet:
        kernel_store.store_record(key, {"screen": chosen}, others.share)
    return screen if chosen else None


def head_name(lm: LoadedModel) -> str:
    """What the LM head that picks ``lm``'s tokens is, for cost-curve keys and benchmark meta."""
    return lm.screen.name if lm.screen is not None else str(lm.dtype).removeprefix("torch.")
