"""Two ways to a cheaper verify(32) on the CPU, measured against what the loop does (2026-12-01, session 54).

1. The bfloat16 screen's product (``talon.models.lm_head.ScreenedHead``): oneDNN's packed AMX kernel,
   ``[rows, H] x packed [vocab, H]``, against the product the other way round, ``[vocab, H] x [H, rows]``
   (the vocabulary as the long side), each with the float32 copy the pick reads, and then with the
   per-row top-16 and normaliser the screen takes of it (the transposed layout's by torch over dim 0).
2. Attention of 9 query heads over 3 key/value heads (SmolLM2-135M): PyTorch's SDPA with ``enable_gqa``
   (what the CPU loop runs) against the stacked-matmul kernel the GPU runs
   (``talon.models.gqa_attention.grouped_matmul_attention``).

Medians of interleaved calls in random order; weights and hidden states scaled as a real LM head's
(logits within about +-25, so the normaliser's exp meets no subnormal numbers).

    PYTHONPATH=. python docs/bench/xeon-emr-r55/verify32_options.py
"""

from __future__ import annotations

import random
import time
from functools import partial

import torch

from talon.models.gqa_attention import additive_mask, grouped_matmul_attention
from talon.models.row_top import row_topk

ROUNDS = 80


def medians(calls: dict, rounds: int = ROUNDS) -> dict[str, float]:
    """Median ms of each call, interleaved in a random order each round."""
    times = {name: [] for name in calls}
    for _ in range(rounds):
        for name in random.sample(list(calls), len(calls)):
            start = time.perf_counter()
            calls[name]()
            times[name].append(time.perf_counter() - start)
    return {name: sorted(v)[len(v) // 2] * 1e3 for name, v in times.items()}


def packed_scores(hidden: torch.Tensor, packed: torch.Tensor) -> torch.Tensor:
    return torch.ops.mkldnn._linear_pointwise(hidden, packed, None, "none", [], "").float()  # [rows, vocab]


def transposed_scores(hidden: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
    return torch.mm(weight, hidden.T).float()  # [vocab, rows]


def packed_all(hidden: torch.Tensor, packed: torch.Tensor) -> None:
    scores = packed_scores(hidden, packed)
    row_topk(scores, 16), torch.logsumexp(scores, dim=1)


def transposed_all(hidden: torch.Tensor, weight: torch.Tensor) -> None:
    scores = transposed_scores(hidden, weight)
    torch.topk(scores, 16, dim=0), torch.logsumexp(scores, dim=0)


def sdpa_gqa(q, k, v, mask) -> torch.Tensor:
    out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=0.125, enable_gqa=True)
    return out.transpose(1, 2).contiguous()


def screen_product() -> None:
    torch.manual_seed(0)
    weight = (torch.randn(49152, 576) * 0.05).bfloat16().contiguous()
    packed = torch.ops.mkldnn._reorder_linear_weight(weight, 64)
    print("screen product, ms: rows: packed + float / transposed + float /")
    print("    packed + top-16 + normaliser / transposed + top-16 + normaliser")
    for rows in (1, 16, 32):
        hidden = (torch.randn(rows, 576) * 4).bfloat16()
        assert torch.equal(packed_scores(hidden, packed), transposed_scores(hidden, weight).T), "bits differ"
        m = medians(
            {
                "packed": partial(packed_scores, hidden, packed),
                "transposed": partial(transposed_scores, hidden, weight),
                "packed_all": partial(packed_all, hidden, packed),
                "transposed_all": partial(transposed_all, hidden, weight),
            }
        )
        print(
            f"  {rows:2d}: "
            + " / ".join(f"{m[k]:.2f}" for k in ("packed", "transposed", "packed_all", "transposed_all"))
        )


def attention() -> None:
    torch.manual_seed(0)
    print("attention per layer, us: keys, rows: SDPA enable_gqa / stacked matmul")
    for keys in (300, 600):
        for rows in (1, 16, 32):
            q, k, v = torch.randn(1, 9, rows, 64), torch.randn(1, 3, keys, 64), torch.randn(1, 3, keys, 64)
            visible = torch.ones(1, 1, rows, keys, dtype=torch.bool)
            visible[..., keys - rows :] = torch.tril(torch.ones(rows, rows, dtype=torch.bool))
            mask = additive_mask(visible, torch.float32)
            m = medians(
                {
                    "sdpa": partial(sdpa_gqa, q, k, v, mask),
                    "matmul": partial(grouped_matmul_attention, q, k, v, mask, 0.125),
                },
                rounds=300,
            )
            print(f"  {keys}, {rows:2d}: {m['sdpa'] * 1e3:.0f} / {m['matmul'] * 1e3:.0f}")


if __name__ == "__main__":
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    screen_product()
    attention()
