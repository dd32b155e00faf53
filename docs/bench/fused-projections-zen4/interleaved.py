"""What the experiments beside it share: the embedded target as it loaded before the change (its
projections separate), logits of each variant against the first, and verify(n) of each variant timed in
interleaved, shuffled rounds (the cost suite's pieces, 128-token context), medians printed as ratios to
the first variant.  ``set_variant(name)`` switches the model."""

import random
import statistics
import types

import torch

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models import loading
from talon.models.cpu_linear import PackedLinear


def target_before_fusion(dtype=None):
    """The embedded target (in ``dtype``, the default's where None) loaded as before
    ``talon.models.fused_linear`` (every projection its own packed product): what the experiments before
    the change ran on."""
    fuse = loading.fuse_projections
    loading.fuse_projections = lambda model: 0
    try:
        return loading.load_model("embedded", dtype=dtype)
    finally:
        loading.fuse_projections = fuse


def zero_linears(model):
    """A switch for ``model``'s packed linears: ``switch(True)`` makes each return a constant tensor of its
    output shape instead of its product (what a forward spends outside the linears), ``switch(False)``
    restores them."""
    lins = [m for m in model.modules() if isinstance(m, PackedLinear)]
    own = {id(m): m.forward for m in lins}

    def zero_forward(self, x):
        return torch.zeros(*x.shape[:-1], self.out_features, dtype=x.dtype) + 0.01

    def switch(on: bool) -> None:
        for m in lins:
            m.forward = types.MethodType(zero_forward, m) if on else own[id(m)]

    return switch


def logit_diffs(target, set_variant, variants: str) -> None:
    """Print each variant's largest logit difference from the first's, and how often their argmax agree,
    over one forward of the context."""
    x = torch.tensor([context_ids(target)])
    outs = {}
    with torch.inference_mode():
        for v in variants:
            set_variant(v)
            outs[v] = target.model(x).logits[0]
    first = outs[variants[0]]
    for v in variants[1:]:
        agree = (outs[v].argmax(-1) == first.argmax(-1)).float().mean().item()
        print(f"{v}: max |logit diff| {(outs[v] - first).abs().max().item():.3g}, argmax agree {agree:.4f}")


def verify_ab(target, set_variant, variants: str, sizes, rounds: int, restore: str) -> None:
    """Time verify(size) for every variant and size, ``rounds`` shuffled rounds (each timing after one
    untimed verification), and print the medians; ``restore``: the variant left in place."""
    pieces = _Pieces(target, NoDrafter(), context_ids(target), sizes, ())
    times = {(v, s): [] for v in variants for s in sizes}
    for _ in range(rounds):
        order = list(times)
        random.shuffle(order)
        for v, s in order:
            set_variant(v)
            pieces.verify(s)
            times[(v, s)].append(pieces.verify(s))
    set_variant(restore)
    for s in sizes:
        ref = statistics.median(times[(variants[0], s)])
        cells = [f"{v} {statistics.median(times[(v, s)]) * 1e3:.2f} ms ({statistics.median(times[(v, s)]) / ref:.3f})" for v in variants]
        print(f"verify({s}): " + "  ".join(cells))
