"""Randomness of sampling at temperature > 0, keyed by output position.

The token after the node at position ``p`` is ``argmax(logits / T + g_p)`` where ``g_p`` is Gumbel noise
drawn from a generator seeded by ``(seed, p)`` (the Gumbel-max trick: this is an exact sample from
``softmax(logits / T)``, and noises of different positions are independent).  Verification of a tree
then takes that same token at every visited node and descends into the child holding it, so the output
is *exactly* the sequence plain autoregressive sampling with the same seed gives, whatever the tree:
every method, synchronous or asynchronous, emits the same sample for a given seed and device.  A
child x is accepted with probability p(x) and, when every child is refused, the next token follows
p restricted to the other tokens, the law of EAGLE's sequential rule (docs/decisions.md).
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

MASK64 = (1 << 64) - 1


def gumbel(uniform: torch.Tensor) -> torch.Tensor:
    """Gumbel(0, 1) noise from uniforms in [0, 1) (a 0 gives -inf, never the argmax)."""
    return -torch.log(-torch.log(uniform))


class PositionNoise:
    """Gumbel noise rows ``[vocab]`` per output position for one run (``seed``), on ``device``.

    A row is drawn once from a generator seeded by ``(seed, position)`` and kept until
    ``forget_before`` passes its position, so a position verified in two steps sees the same noise."""

    def __init__(self, seed: int, vocab: int, device: torch.device) -> None:
        self.seed, self.vocab, self.device = int(seed), int(vocab), device
        self._rows: dict[int, torch.Tensor] = {}

    def key(self, position: int) -> int:
        """The generator seed of ``position``: the run's seed and the position mixed by SplitMix64 and
        folded to 32 bits (the CPU generator keeps only the low 32 bits of a seed)."""
        x = (((self.seed & 0xFFFFFFFF) << 32) | (int(position) & 0xFFFFFFFF)) + 0x9E3779B97F4A7C15
        x &= MASK64
        x = ((x ^ (x >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
        x = ((x ^ (x >> 27)) * 0x94D049BB133111EB) & MASK64
        x ^= x >> 31
        return (x ^ (x >> 32)) & 0xFFFFFFFF

    def row(self, position: int) -> torch.Tensor:
        if position not in self._rows:
            g = torch.Generator(device=self.device).manual_seed(self.key(position))
            self._rows[position] = gumbel(torch.rand(self.vocab, generator=g, device=self.device))
        return self._rows[position]

    def rows(self, positions: Sequence[int]) -> torch.Tensor:
        """Float32 ``[len(positions), vocab]``."""
        return torch.stack([self.row(p) for p in positions])

    def forget_before(self, position: int) -> None:
        """Drop the rows of positions that can no longer be verified (before ``position``)."""
        for p in [p for p in self._rows if p < position]:
            del self._rows[p]
