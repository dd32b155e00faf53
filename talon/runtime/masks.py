"""What each query row of a tree forward may see, built on the host.

A forward's mask is a handful of boolean rows: every committed row, plus the tree rows of the row's own
ancestors and itself.  It is built with numpy from the tree's ancestor closure (kept on the host as the
tree grows) and reaches the device in one copy: on a GPU, building it there took a dozen small kernel
launches per forward, which for a draft head's call cost more than the head's own work.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class VisibleRows:
    """What ``q`` new query rows see among the rows ``[0, length + q)`` (``length`` rows held before them):
    every row of ``[0, prefix)`` (the committed rows), then ``block`` for the rest.

    Attributes:
        prefix: rows every query row sees.
        block: bool ``[q, length + q - prefix]``: the rows from ``prefix`` on (this step's tree rows,
            then the new rows themselves).
    """

    prefix: int
    block: np.ndarray

    def fill(self, out: np.ndarray) -> None:
        """Write the mask into ``out``, bool ``[q, length + q]``."""
        out[:, : self.prefix] = True
        out[:, self.prefix :] = self.block

    def dense(self) -> np.ndarray:
        """The mask as bool ``[q, length + q]``."""
        q, rest = self.block.shape
        out = np.empty((q, self.prefix + rest), dtype=bool)
        self.fill(out)
        return out


def causal(q: int, prefix: int) -> VisibleRows:
    """``q`` new rows after ``prefix`` visible rows, causal among themselves."""
    return VisibleRows(prefix, np.tril(np.ones((q, q), dtype=bool)))


def tree_rows_mask(
    old_closure: np.ndarray, parent_local: Sequence[int], parent_old: Sequence[int], generation: Sequence[int]
) -> np.ndarray:
    """Which tree rows each of ``q`` new tree rows may see: its ancestors and itself.

    Args:
        old_closure: bool ``[T, T]``, ancestor-or-self closure of the ``T`` tree rows already there.
        parent_local: per new row, the new row holding its parent, or -1.
        parent_old: per new row, the old tree row holding its parent, or -1 (when the parent is a new
            row too, or is not among the tree rows: the committed root).
        generation: per new row, 1 + its parent's generation when the parent is a new row, else 1
            (new rows come parents first, so a row's parent has a smaller generation).

    Returns:
        bool ``[q, T + q]``: columns ``[0, T)`` the old tree rows, ``[T, T + q)`` the new rows.
    """
    q, t = len(parent_local), old_closure.shape[0]
    out = np.zeros((q, t + q), dtype=bool)
    new = np.arange(q)
    out[new, t + new] = True
    old = np.asarray(parent_old, dtype=np.int64)
    below_old = old >= 0
    if below_old.any():
        out[below_old, :t] = old_closure[old[below_old]]
    local = np.asarray(parent_local, dtype=np.int64)
    gen = np.asarray(generation, dtype=np.int64)
    for g in range(2, int(gen.max(initial=1)) + 1):  # one vectorised OR per generation
        rows = np.flatnonzero(gen == g)
        out[rows] |= out[local[rows]]
    return out
