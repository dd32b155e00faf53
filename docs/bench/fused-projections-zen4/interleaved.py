"""What the experiments beside it share: the embedded target as it loaded before the change (its
projections separate), logits of each variant against the first, and verify(n) of each variant timed in
interleaved, shuffled rounds (the cost suite's pieces, 128-token context), medians printed as ratios to
the first variant.  ``set_variant(name)`` switches the model."""

import random
import statistics

import torch

from talon.drafters.base import NoDrafter
from talon.engine.cost_measure import _Pieces, context_ids
from talon.models import loading


def target_before_fusion():
    """The embedded target loaded as before ``talon.models.fused_linear`` (every projection its own
    packed product): what the experiments before the change ran on."""
    fuse = loading.fuse_projections
    loading.fuse_projections = lambda model: 0
    try:
        return loading.load_model("embedded")
    finally:
        loading.fuse_projections = fuse


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
