"""Batch invariance on this CPU: is one row's result bitwise the same whatever else is in the call?

Linears: for each linear shape of the embedded model (q/o 576x576, k/v 576x192, gate/up 576x1536,
down 1536x576, LM head 576x49152), the packed oneDNN kernel (``talon.models.cpu_linear.PackedLinear``)
and PyTorch's own ``F.linear``, float32 and bfloat16: row 0 of an M-row product (the other rows random)
against the same row alone (M=1) and in a 16-row product.  ``=`` equal, ``x`` different.

Attention: ``F.scaled_dot_product_attention`` as the embedded model calls it (9 query heads, 3 KV heads,
head dim 64) for one query over L prefix keys and d path keys: alone without a mask (a plain step)
against the same query with an all-true mask, among 16 query rows with 15 more keys it must not see,
with the path keys interleaved with masked sibling keys (a tree verification), and that among 8 rows.

Run from the repository root: ``PYTHONPATH=. python docs/bench/bf16-invariance-cpu-epyc-zen4/invariance.py``."""

import torch
import torch.nn.functional as F
from torch import nn

from talon.models.cpu_linear import PackedLinear

SHAPES = [(576, 576), (576, 192), (576, 1536), (1536, 576), (576, 49152)]
ROWS = [1, 2, 3, 4, 8, 16, 17, 24, 32, 64, 128]
H, KV, D = 9, 3, 64


def linears() -> None:
    for dtype in (torch.float32, torch.bfloat16):
        for kind in ("packed", "F.linear"):
            print(f"{dtype} {kind}, M = {ROWS}")
            for fin, fout in SHAPES:
                lin = nn.Linear(fin, fout, bias=False).to(dtype)
                f = PackedLinear(lin) if kind == "packed" else lin
                x0 = torch.randn(1, fin).to(dtype)
                with torch.no_grad():
                    row = {m: f(torch.cat([x0, torch.randn(m - 1, fin).to(dtype)]))[0] for m in ROWS}
                vs1 = "".join("=" if torch.equal(row[m], row[1]) else "x" for m in ROWS)
                vs16 = "".join("=" if torch.equal(row[m], row[16]) else "x" for m in ROWS)
                print(f"    {fin}x{fout}: vs M=1 {vs1}  vs M=16 {vs16}")


def sdpa(q, k, v, mask=None):
    k, v = k.repeat_interleave(H // KV, dim=1), v.repeat_interleave(H // KV, dim=1)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def rnd(n: int, dtype) -> torch.Tensor:
    return torch.randn(1, KV, n, D).to(dtype)


def attention() -> None:
    for dtype in (torch.bfloat16, torch.float32):
        for length in (60, 200, 700):
            for d in (0, 3):
                keys, vals, q0 = rnd(length + d, dtype), rnd(length + d, dtype), torch.randn(1, H, 1, D).to(dtype)
                ref = sdpa(q0, keys, vals)[0, :, 0]
                all_true = sdpa(q0, keys, vals, torch.ones(1, 1, 1, length + d, dtype=torch.bool))[0, :, 0]
                k2, v2 = torch.cat([keys, rnd(15, dtype)], 2), torch.cat([vals, rnd(15, dtype)], 2)
                q2 = torch.cat([q0, torch.randn(1, H, 15, D).to(dtype)], 2)
                m2 = torch.ones(1, 1, 16, length + d + 15, dtype=torch.bool)
                m2[:, :, 0, length + d :] = False
                rows16 = sdpa(q2, k2, v2, m2)[0, :, 0]
                ks, vs, keep = [keys[:, :, :length]], [vals[:, :, :length]], [True] * length
                for i in range(d):  # prefix, sibling, path 1, sibling, path 2, ...
                    ks += [rnd(1, dtype), keys[:, :, length + i : length + i + 1]]
                    vs += [rnd(1, dtype), vals[:, :, length + i : length + i + 1]]
                    keep += [False, True]
                k3, v3, m3 = torch.cat(ks, 2), torch.cat(vs, 2), torch.tensor(keep)[None, None, None, :]
                tree = sdpa(q0, k3, v3, m3)[0, :, 0]
                m4 = torch.cat([m3, torch.ones(1, 1, 7, m3.shape[-1], dtype=torch.bool)], 2)
                tree8 = sdpa(torch.cat([q0, torch.randn(1, H, 7, D).to(dtype)], 2), k3, v3, m4)[0, :, 0]
                print(
                    f"{str(dtype):15s} L={length:4d} d={d}: all-true mask {torch.equal(all_true, ref)!s:5s} "
                    f"16 rows {torch.equal(rows16, ref)!s:5s} interleaved {torch.equal(tree, ref)!s:5s} "
                    f"interleaved, 8 rows {torch.equal(tree8, ref)!s:5s} "
                    f"max |diff| {(tree8.float() - ref.float()).abs().max().item():.1e}"
                )


if __name__ == "__main__":
    torch.manual_seed(0)
    torch.set_num_threads(2)
    linears()
    attention()
