"""A growing buffer of per-position rows (target features, a head's fused features): preallocated,
doubling, so appending a step's rows never re-concatenates the whole history."""

from __future__ import annotations

import torch


class GrowingRows:
    """Rows ``[length, *shape]`` in a buffer that doubles when full.

    A view taken with ``view()`` stays valid while more rows are appended: appends write past it (or into
    a new, bigger buffer), never over it.  Only ``truncate`` followed by an append rewrites rows."""

    def __init__(self, shape: tuple[int, ...], dtype: torch.dtype, device: torch.device, capacity: int = 256) -> None:
        self.buffer = torch.empty(capacity, *shape, dtype=dtype, device=device)
        self.length = 0

    def append(self, rows: torch.Tensor) -> None:
        """Append ``rows`` ``[k, *shape]``."""
        self.write(self.length, rows)

    def write(self, start: int, rows: torch.Tensor) -> None:
        """Set rows ``[start, start + k)`` (``start <= length``), growing the buffer if needed."""
        if start > self.length:
            raise ValueError(f"row {start} would leave a gap after the {self.length} rows held")
        end = start + rows.shape[0]
        if end > self.buffer.shape[0]:
            bigger = self.buffer.new_empty(max(end, 2 * self.buffer.shape[0]), *self.buffer.shape[1:])
            bigger[: self.length] = self.buffer[: self.length]
            self.buffer = bigger
        self.buffer[start:end] = rows
        self.length = max(self.length, end)

    def truncate(self, length: int) -> None:
        self.length = min(self.length, length)

    def view(self) -> torch.Tensor:
        """The rows held, ``[length, *shape]`` (a view, not a copy)."""
        return self.buffer[: self.length]
