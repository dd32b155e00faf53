"""Talon's progress lines in Gradio's progress bar.  The bar always shows a percentage next to its text,
so a line that counts rounds ("round 3 of 9", "replaying step 3 of 9") moves the bar to the rounds already
done; other lines keep it where it was (0 % until something counts)."""

from __future__ import annotations

import re
from collections.abc import Callable

import gradio as gr

ROUND = re.compile(r"\b(?:round|replaying step) (\d+) of (\d+)\b")


def done_share(line: str) -> float | None:
    """The share of the work done before the round ``line`` announces (``"round 3 of 9"`` -> 2/9), or
    None when the line counts nothing."""
    match = ROUND.search(line)
    if match is None:
        return None
    current, total = int(match.group(1)), int(match.group(2))
    return min(max(current - 1, 0) / total, 1.0) if total > 0 else None


def reporter(progress: gr.Progress | None) -> Callable[[str], None] | None:
    """A talon progress callback (one line at a time) that shows each line in ``progress``'s bar, the
    bar at ``done_share`` of the last line that counted; None without a bar."""
    if progress is None:
        return None
    share = [0.0]

    def report(line: str) -> None:
        found = done_share(line)
        if found is not None:
            share[0] = found
        progress(share[0], desc=line)

    return report
