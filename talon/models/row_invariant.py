"""A bfloat16 CPU forward that gives every row the same bits whatever else shares its forward, so that
verifying a tree emits exactly the tokens plain decoding emits (``docs/decisions.md``, "Exact
bfloat16 on the CPU").

Plain decoding computes one row a forward; tree verification computes a row per node, beside its
siblings.  Kernels pick their algorithm by shape, and in bfloat16 the roundings that follow differ by
enough to flip near-tie greedy tokens (``docs/benchmarks.md``: with the stock forward, TALON equalled
bfloat16 plain decoding on 7 of 14 prompts).  On this project's AVX512-BF16 CPU three things were
found to differ with the number of rows (``docs/bench/bf16-invariance-cpu-epyc-zen4``), and this
module replaces each by a computation whose every row follows one fixed order of operations:

- **linears**: oneDNN's packed bfloat16 kernel at every row count (``auto`` mode would take MKL's at
  one or two rows, another kernel), and a linear with more than ``LONE_ROW_INPUTS`` inputs (the MLP's
  down projection, 1536) never given a lone row, which the kernel computes another way.  On an Intel
  Xeon with AMX the kernel's algorithm changes with the row count at every scale (a row's bits differed
  between 6 and 160 rows in the gate projection, between 1 and 33 in the LM head), so there every
  product runs over blocks of exactly ``BLOCK_ROWS`` rows, one AMX tile high, which give a row the same
  bits wherever it sits in the block (and two blocks in one call give each the bits it gets alone, at
  about half the price: ``CALL_ROWS``); which rule holds is checked at load (``rows_invariant``);
- **attention** (``invariant_attention``): scores from one float32 batched matmul with the query rows
  padded to a multiple of ``ROW_PAD`` (fewer rows take another kernel), masked exponentials, and the
  weighted sum of values with a column of ones appended (so the softmax's normaliser comes out of the
  same products as the output), reduced over fixed chunks of ``CHUNK`` *logical* positions (position
  in the sequence, not in the KV buffer, where a tree row's ancestors sit among its siblings' rows) and
  the chunks' partial sums added in chunk order.  A chunk holding a tree's rows also spans the siblings
  between them, whose weights are exact zeros; a matmul whose reduction is one chain of multiply-adds
  (up to ``LONGEST_CHAIN`` keys here) gives the same bits with or without them.

Everything else in a Llama layer (norms, rotary embeddings, activations, residual additions) is
row-wise already.  The float32 default keeps transformers' SDPA and MKL's one-row kernel: it is exact
in every suite without this (``docs/benchmarks.md``), and faster there.  ``make_row_invariant`` applies
the whole set to a model loaded for our own loop in bfloat16 on a CPU that has the packed bfloat16
kernel; the transformers peers run the model as transformers builds it.
"""

from __future__ import annotations

import threading
import weakref

import torch
from torch import nn
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from .cpu_linear import PackedLinear, onednn_linear_works
from .fused_linear import FusedRows, fused_products
from .gqa_attention import DELEGATED_TO_SDPA, register_attention

INVARIANT_ATTENTION = "talon_cpu_row_invariant"
"""The attention implementation's registered name (``model.config._attn_implementation``)."""
ROW_PAD = 16
"""Query rows (query heads x rows, per key/value head) are padded to a multiple of this: with fewer
than about ten rows this CPU's float32 batched matmul took another kernel and other bits."""
CHUNK = 64
"""Keys are reduced in chunks of this many logical positions."""
LONGEST_CHAIN = 192
"""Longest reduction (keys) that this CPU's float32 batched matmul did as one chain of multiply-adds,
whatever zeros it held (measured: 194 keys split); a chunk holding a tree's rows spans at most
``CHUNK - 1 + rows`` keys, so trees of up to 129 rows (root included) stay within it."""
ROW_BLOCK = 512
"""Query rows (per head) per block, bounding the score matrix of a long prompt's one-forward prefill."""
LONE_ROW_INPUTS = 1024
"""Linears with more inputs than this never multiply a lone row (``PackedLinear.pair_lone_row``: one
row beside a row of zeros, at about the one-row price since the weights are read once either way):
products up to 1024 long gave a row the same bits at every row count, 1536 long at every count but
one."""

BLOCK_ROWS = 16
"""Rows of every product where a lone row beside zeros is not enough (``PackedLinear.block_rows``): one
AMX tile high; on the AMX Xeon the model's linears took 17.0 ms at 16 rows against 16.9 at one."""
CALL_ROWS = 32
"""Rows one call may take in blocks of ``BLOCK_ROWS`` where ``rows_invariant`` finds each block gets the
bits it gets alone (``PackedLinear.call_rows``): on the AMX Xeon a 32-row call gave two 16-row calls'
bits in every linear of the model, at 0.55-0.75 of their time (weights read once); 48 and 64 rows did not."""
PROBE_ROWS = (1, 2, 3, 5, 8, 16, 17, 32, 33, 48, 64, 96, 129)
"""Row counts at which ``rows_invariant`` checks a linear's rows against the same rows among 130."""


_DELEGATED = (*DELEGATED_TO_SDPA, "sliding_window")
"""Keyword arguments that send a forward to transformers' ``sdpa`` when given."""


class _Block:
    """One block of query rows ``[r0, r1)``: the additive mask (None when every row sees every key),
    the ``full`` leading chunks (keys ``[0, full * CHUNK)``, seen by every row), and per later chunk the
    span of keys ``[lo, hi)`` holding it and, where the span also holds keys of another chunk a row
    sees, a 0/1 float ``[rows, hi - lo]`` that keeps only the chunk's own."""

    def __init__(self, vis: torch.Tensor, chunk: torch.Tensor, r0: int, r1: int, full: int) -> None:
        self.r0, self.r1 = r0, r1
        rows_vis = vis[r0:r1]
        self.bias = None if bool(rows_vis.all()) else torch.zeros(rows_vis.shape).masked_fill_(~rows_vis, float("-inf"))
        self.full = full
        rows_chunk = chunk[r0:r1]
        self.tails: list[tuple[int, int, torch.Tensor | None]] = []
        for c in range(self.full, int(rows_chunk.max()) + 1):
            own = rows_chunk == c
            cols = own.any(0).nonzero().flatten()
            if cols.numel() == 0:
                continue
            lo, hi = int(cols[0]), int(cols[-1]) + 1
            others = rows_vis[:, lo:hi] & ~own[:, lo:hi]
            self.tails.append((lo, hi, (~others).float() if bool(others.any()) else None))


class _Plan:
    """What every layer of one forward shares, from its mask ``vis`` ``[q, kv]`` (True = visible) whose
    last ``q`` keys are this forward's own rows: each key's logical position (a key before this
    forward's rows: its index; a row's own key: the number of keys the row sees, minus one), the
    chunks every row sees whole (within the leading keys all rows see: the committed prefix; a draft
    model's tree rows from earlier forwards of the step come after it) and the blocks of query rows.
    Every key a row sees falls in one chunk, so the result is attention whatever the positions; they
    make it row-invariant where they are the sequence's (the target's verification: committed prefix,
    then the tree)."""

    def __init__(self, vis: torch.Tensor) -> None:
        q, kv = vis.shape
        first = kv - q
        seen_by_all = vis.all(0)
        leading = kv if bool(seen_by_all.all()) else int((~seen_by_all).nonzero()[0])
        full = min(leading, first) // CHUNK
        position = torch.arange(kv)
        position[first:] = vis.sum(-1) - 1  # >= leading: a row sees the leading keys and itself
        chunk = torch.where(vis, (position // CHUNK)[None, :], -1)
        self.blocks = [_Block(vis, chunk, r0, min(r0 + ROW_BLOCK, q), full) for r0 in range(0, q, ROW_BLOCK)]


class _PlanCache:
    """The plan of the forward in progress, per mask tensor (a forward passes one mask object to every
    layer).  Held weakly and checked by identity, so a later mask at a recycled address never reads a
    stale plan; a lock keeps two users' forwards in threads from racing on it."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._entries: dict[int, tuple[weakref.ref, tuple, _Plan]] = {}

    def get(self, mask: torch.Tensor, vis_of) -> _Plan:
        key = (tuple(mask.shape), mask.data_ptr())
        with self._lock:
            hit = self._entries.get(id(mask))
            if hit is not None and hit[0]() is mask and hit[1] == key:
                return hit[2]
        plan = _Plan(vis_of(mask))
        with self._lock:
            if len(self._entries) > 32:
                self._entries = {k: v for k, v in self._entries.items() if v[0]() is not None}
            self._entries[id(mask)] = (weakref.ref(mask), key, plan)
        return plan


_PLANS = _PlanCache()
"""Derived from each forward's own mask only (no user's data outlives its mask), shared by threads."""


def _visible(mask: torch.Tensor, kv: int) -> torch.Tensor:
    m = mask[0, 0, :, :kv]
    return m if m.dtype == torch.bool else m == 0


def invariant_attention(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' attention-function contract: ``query`` ``[1, heads, q, D]``, ``key`` / ``value``
    ``[1, kv_heads, kv, D]`` (the last ``q`` keys are the query rows' own), ``attention_mask`` bool (True
    = visible) or additive ``[1, 1, q, >= kv]`` or None (causal) -> ``([1, q, heads, D], None)`` in the
    query's dtype, computed in float32 (module docstring).  A batch of several sequences (our loop
    decodes one), soft-capping, sinks or a sliding window take transformers' ``sdpa``: attention still,
    not row-invariant."""
    batch, heads, q, dim = query.shape
    kv_heads, kv = key.shape[1], key.shape[2]
    if batch != 1 or any(kwargs.get(k) is not None for k in _DELEGATED):
        return sdpa_attention_forward(module, query, key, value, attention_mask, dropout, scaling, is_causal, **kwargs)
    group = heads // kv_heads
    if attention_mask is None:
        plan = _Plan(torch.ones(q, kv, dtype=torch.bool).tril(kv - q))
    else:
        plan = _PLANS.get(attention_mask, lambda m: _visible(m, kv))
    scale = scaling if scaling is not None else dim**-0.5
    keys = key[0].float().transpose(1, 2)  # [kv_heads, D, kv]
    values = torch.empty((kv_heads, kv, dim + 1), dtype=torch.float32)
    values[..., :dim] = value[0]
    values[..., dim] = 1.0
    grouped = query[0].reshape(kv_heads, group, q, dim)
    out = torch.empty((q, kv_heads, group, dim), dtype=query.dtype)
    for block in plan.blocks:
        n = block.r1 - block.r0
        rows = group * n
        padded = -(-rows // ROW_PAD) * ROW_PAD
        qf = torch.zeros((kv_heads, padded, dim), dtype=torch.float32)
        qf[:, :rows].view(kv_heads, group, n, dim).copy_(grouped[:, :, block.r0 : block.r1]).mul_(scale)
        scores = torch.bmm(qf, keys)  # [kv_heads, padded, kv]; padded rows are dropped below
        if block.bias is not None:
            scores[:, :rows].view(kv_heads, group, n, kv).add_(block.bias)
        weights = scores.sub_(scores.amax(-1, keepdim=True)).exp_()
        parts = []
        if block.full:
            span = block.full * CHUNK
            per_chunk = weights[:, :, :span].reshape(kv_heads, padded, block.full, CHUNK).transpose(1, 2)
            sums = torch.bmm(
                per_chunk.reshape(kv_heads * block.full, padded, CHUNK),
                values[:, :span].reshape(kv_heads * block.full, CHUNK, dim + 1),
            )
            parts += sums.view(kv_heads, block.full, padded, dim + 1).unbind(1)
        for lo, hi, keep in block.tails:
            w = weights[:, :, lo:hi]
            if keep is not None:
                w = w.clone()
                w[:, :rows].view(kv_heads, group, n, hi - lo).mul_(keep)
            parts.append(torch.bmm(w, values[:, lo:hi]))
        total = parts[0]
        for part in parts[1:]:  # in chunk order, one addition at a time
            total = total + part
        total = total[:, :rows]
        result = (total[..., :dim] / total[..., dim:]).view(kv_heads, group, n, dim)
        out[block.r0 : block.r1] = result.permute(2, 0, 1, 3)
    return out.view(1, q, heads, dim), None


def make_row_invariant(model: nn.Module) -> bool:
    """Give ``model`` (bfloat16, on the CPU, its linears packed by ``cpu_linear.pack_for_device``) the
    row-invariant forward: every packed linear and fused product (``talon.models.fused_linear``) on the
    packed kernel at every row count, the long ones never given a lone row (or, where
    ``rows_invariant`` finds that is not enough, every product in blocks of ``BLOCK_ROWS``), and
    ``invariant_attention``.  Returns whether it did; a model in another
    dtype or place, one whose linears are not packed (no bfloat16 kernel on this CPU, or
    ``$TALON_CPU_LINEAR=plain``), one whose attention is not transformers' ``sdpa``, or one whose
    linears give a row other bits at some row count either way is left as it is."""
    weight = next((p for p in model.parameters()), None)
    config = getattr(model, "config", None)
    if (
        weight is None
        or config is None
        or weight.device.type != "cpu"
        or weight.dtype != torch.bfloat16
        or getattr(config, "_attn_implementation", None) != "sdpa"
    ):
        return False
    packed = [m for m in model.modules() if isinstance(m, PackedLinear) and m.packed is not None]
    if not packed or not onednn_linear_works(torch.bfloat16):
        return False
    if not invariant_rows(packed + fused_products(model)):  # no rule gives one rounding a row: stays stock
        return False
    register_attention(INVARIANT_ATTENTION, invariant_attention)
    model.set_attn_implementation(INVARIANT_ATTENTION)
    return True


def invariant_rows(linears: list[PackedLinear | FusedRows]) -> bool:
    """Set ``linears`` (packed bfloat16) to give every row one rounding whatever the row count: the packed
    kernel at every count, a long product's lone row beside a row of zeros, or where that is not enough
    (``rows_invariant``) every product in blocks of ``BLOCK_ROWS``, ``CALL_ROWS`` rows a call where
    that holds too.  Returns whether one of the rules holds; if none does, the linears are left on their
    own kernels (``plain_rows`` untouched)."""
    plain_rows = [linear.plain_rows for linear in linears]
    for linear in linears:
        linear.plain_rows = 0
        linear.min_rows = 2 if linear.in_features > LONE_ROW_INPUTS else 0
    if rows_invariant(linears):
        return True
    for call in (CALL_ROWS, 0):  # two blocks a call where that gives each block its own bits, else one
        for linear in linears:
            linear.block_rows, linear.call_rows = BLOCK_ROWS, call
        if rows_invariant(linears):
            return True
    for linear, rows in zip(linears, plain_rows, strict=True):
        linear.plain_rows, linear.min_rows, linear.block_rows, linear.call_rows = rows, 0, 0, 0
    return False


def rows_invariant(linears: list[PackedLinear | FusedRows]) -> bool:
    """Whether each linear or fused product, as set now (``min_rows``, ``block_rows``, ``call_rows``),
    gives every row the bits it gets among 130 random rows at each of ``PROBE_ROWS`` row counts, and a
    row the same bits beside other rows (checked once per shape, on random bfloat16 rows)."""
    gen = torch.Generator().manual_seed(0)
    seen = set()
    with torch.inference_mode():
        for linear in linears:
            shape = (linear.in_features, linear.out_features, linear.min_rows, linear.block_rows, linear.call_rows)
            if shape in seen:
                continue
            seen.add(shape)
            product = linear.product if isinstance(linear, FusedRows) else linear
            dtype = linear.packed.dtype
            x = torch.randn(max(PROBE_ROWS) + 1, linear.in_features, generator=gen).to(dtype)
            full = product(x)
            for n in PROBE_ROWS:
                if not torch.equal(product(x[:n]), full[:n]):
                    return False
                other = torch.randn(n, linear.in_features, generator=gen).to(dtype)
                other[-1] = x[0]
                if not torch.equal(product(other)[-1], full[0]):
                    return False
    return True
