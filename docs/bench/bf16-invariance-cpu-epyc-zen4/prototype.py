"""Prototype, not adopted: a batch-invariant bfloat16 target on this AVX512-BF16 CPU.  Does TALON auto then
emit exactly ar's tokens on the headline suite's 14 example prompts, or on all 30 with ``headline`` (64
tokens, greedy, the shipped head)?

``invariant``: attention computed per query row over its visible keys in position order, in float32
products and sums (rows grouped by their number of visible keys, so a row of a tree runs the same ops on
the same shapes as the one-row plain step that later computes the same token), and the MLP's down
projection (1536 inputs, past the length up to which this CPU's bfloat16 kernels give every row the same
result at any row count) as two 768-input halves added in float32.  ``sdpa``: the model as shipped.
Wall clock per run, sequential, no peers.

    TALON_DTYPE=bfloat16 TALON_CPU_LINEAR=onednn PYTHONPATH=. \\
        python docs/bench/bf16-invariance-cpu-epyc-zen4/prototype.py invariant|sdpa [headline]
    ... prototype.py block|trees invariant|sdpa
"""

import random
import sys
import time

import torch
from transformers import AttentionInterface

from talon.bench.prompts import load_prompt_set
from talon.bench.suites import HEADLINE_PROMPTS
from talon.config import DecodeConfig, TreeConfig
from talon.drafters.factory import drafter_for
from talon.engine.cost_measure import cost_curve_for
from talon.engine.decode import encode_prompt, run_to_end
from talon.models.cpu_linear import PackedLinear
from talon.models.registry import ModelRegistry
from talon.runtime.kv_cache import CachedLM
from talon.tree import DraftTree


def invariant_attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
    """``query`` ``[1, heads, q, dim]``, ``key`` / ``value`` ``[1, kv_heads, kv, dim]``, a bool (or additive)
    mask ``[1, 1, q, kv]`` -> ``[1, q, heads, dim]``: each row over its visible keys only, in float32."""
    _, heads, q, dim = query.shape
    kv_heads, kv = key.shape[1], key.shape[2]
    group = heads // kv_heads
    if attention_mask is None:
        vis = torch.ones(q, kv, dtype=torch.bool).tril(kv - q)
    else:
        m = attention_mask[0, 0]
        vis = (m if m.dtype == torch.bool else m == 0)[:, :kv]
    counts = vis.sum(-1)
    out = torch.zeros(q, heads, dim, dtype=query.dtype)
    for n in counts.unique().tolist():
        if n == 0:
            continue
        rows = (counts == n).nonzero().flatten()
        r = len(rows)
        idx = vis[rows].nonzero()[:, 1].view(r, n)
        k = key[0][:, idx].float().unsqueeze(1)  # [kv_heads, 1, r, n, dim]
        v = value[0][:, idx].float().unsqueeze(1)
        qq = query[0][:, rows].float().view(kv_heads, group, r, 1, dim)  # [kv_heads, group, r, 1, dim]
        # products and sums, not batched matmuls: a batched matmul's result for one row depends on how
        # many rows share the call (float32 scores over about 130 keys and more, this CPU)
        p = torch.softmax((qq * k).sum(-1) * scaling, dim=-1)  # [kv_heads, group, r, n]
        o = (p.unsqueeze(-1) * v).sum(-2)  # [kv_heads, group, r, dim]
        out[rows] = o.reshape(heads, r, dim).transpose(0, 1).to(query.dtype)
    return out[None], None


class SplitK(torch.nn.Module):
    """A linear as two row-invariant products over the halves of its inputs, added in float32."""

    def __init__(self, linear: torch.nn.Linear) -> None:
        super().__init__()
        w = linear.weight.detach()
        self.half = w.shape[1] // 2
        halves = []
        for part in (w[:, : self.half], w[:, self.half :]):
            lin = torch.nn.Linear(part.shape[1], part.shape[0], bias=False, dtype=w.dtype)
            lin.weight.data = part.contiguous()
            halves.append(PackedLinear(lin))
        self.a, self.b = halves

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.a(x[..., : self.half]).float() + self.b(x[..., self.half :]).float()).to(x.dtype)


def make_invariant(target) -> None:
    """Swap the prototype's attention and split down projection into ``target``'s model."""
    AttentionInterface.register("talon_invariant", invariant_attention)
    target.model.config._attn_implementation = "talon_invariant"
    for layer in target.model.model.layers:
        layer.mlp.down_proj = SplitK(layer.mlp.down_proj)


def block(mode: str) -> None:
    """12 tokens after a 60-token prefix, fed one at a time and as one causal block: which rows' logits
    are bitwise equal?"""
    target = ModelRegistry().get("embedded")
    if mode == "invariant":
        make_invariant(target)
    prefix, tokens = list(range(1000, 1060)), list(range(2000, 2012))
    with torch.no_grad():
        one_by_one = CachedLM(target)
        one_by_one.extend_committed(prefix)
        rows = [one_by_one.extend_committed([t], logit_rows="all").logits[0] for t in tokens]
        together = CachedLM(target)
        together.extend_committed(prefix)
        logits = together.extend_committed(tokens, logit_rows="all").logits
    equal = "".join("=" if torch.equal(rows[i], logits[i]) else "x" for i in range(len(tokens)))
    print(f"{mode} ({target.dtype}): rows 1-{len(tokens)} of the block equal to one at a time: {equal}")


def trees(mode: str) -> None:
    """Random trees of 6 to 127 drafts after two example prompts, verified in one forward: does each row on
    the deepest path get the bits it gets when the path is fed one token at a time?"""
    target = ModelRegistry().get("embedded")
    if mode == "invariant":
        make_invariant(target)
    prompts = {p["id"]: p for p in load_prompt_set(HEADLINE_PROMPTS[0])[0]}
    rng = random.Random(0)
    for pid in ("summ-1", "list-1"):
        ids = encode_prompt(target, prompts[pid]["prompt"])
        for size in (6, 20, 60, 100, 127):
            tree = DraftTree.with_root(ids[-1])
            for _ in range(size):
                tree.add(rng.randrange(len(tree)), rng.randrange(100, 20000), -1.0)
            path = [max(range(len(tree)), key=lambda n: tree.depth[n])]
            while tree.parent[path[-1]] != -1:
                path.append(tree.parent[path[-1]])
            path.reverse()
            with torch.no_grad():
                one = CachedLM(target)
                one.extend_committed(ids[:-1])
                rows = [one.extend_committed([tree.token[n]], logit_rows="all").hidden[0] for n in path]
                verify = CachedLM(target)
                verify.extend_committed(ids[:-1])
                hidden = verify.forward_nodes(tree, list(range(len(tree))), len(ids) - 1, logit_rows=None).hidden
            equal = "".join("=" if torch.equal(rows[k], hidden[n]) else "x" for k, n in enumerate(path))
            print(f"{mode}: {pid}, tree of {len(tree)} nodes, path rows (root first) equal: {equal}", flush=True)


def main(mode: str, suite: str = "examples") -> None:
    """``suite``: ``examples`` (the 14 example prompts) or ``headline`` (all 30 of the headline suite)."""
    sets = HEADLINE_PROMPTS if suite == "headline" else HEADLINE_PROMPTS[:1]
    prompts = [p for prompt_set in sets for p in load_prompt_set(prompt_set)[0]]
    registry = ModelRegistry()
    target = registry.get("embedded")
    drafter = drafter_for("talon", "head", target, registry)  # before the split: the head checks the weights
    if mode == "invariant":
        make_invariant(target)
    curve = cost_curve_for(target, drafter)
    talon = TreeConfig(method="talon", budget=128, topk=6, mu=0.1, auto=True)
    same, seconds, tokens = 0, {"ar": 0.0, "talon": 0.0}, 0
    for p in prompts:
        outs = {}
        for method, cfg in (("ar", TreeConfig(method="ar")), ("talon", talon)):
            start = time.perf_counter()
            trace = run_to_end(
                target,
                None if method == "ar" else drafter,
                cfg,
                DecodeConfig(max_new_tokens=64),
                p["prompt"],
                texts=False,
                cost_curve=curve,
            )
            seconds[method] += time.perf_counter() - start
            outs[method] = list(trace.output_ids)
        tokens += len(outs["ar"])
        same += outs["ar"] == outs["talon"]
        print(f"{p['id']:8s} talon+auto equals ar: {outs['ar'] == outs['talon']}", flush=True)
    ar, tal = tokens / seconds["ar"], tokens / seconds["talon"]
    print(f"{mode} ({target.dtype}): {same}/{len(prompts)} equal; ar {ar:.1f} tok/s, talon+auto {tal:.1f} tok/s")


if __name__ == "__main__":
    if sys.argv[1] == "block":
        block(sys.argv[2])
    elif sys.argv[1] == "trees":
        trees(sys.argv[2])
    else:
        main(*sys.argv[1:3])
