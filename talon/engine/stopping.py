"""Where generated output ends: the one rule for cutting committed tokens at an end-of-sequence token
and at the max-new-tokens limit, shared by the decoding loop, the transformers peers and the head
trainer."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from ..trace import EOS, MAX_NEW_TOKENS, STOPPED

__all__ = ["EOS", "MAX_NEW_TOKENS", "STOPPED", "cut_at_eos", "cut_step"]


def cut_at_eos(ids: Sequence[int], eos: Collection[int]) -> list[int]:
    """``ids`` up to and including the first token in ``eos``."""
    out = []
    for t in ids:
        out.append(int(t))
        if t in eos:
            break
    return out


def cut_step(new_ids: Sequence[int], eos: Collection[int], room: int) -> tuple[list[int], str]:
    """The tokens of one step that make it into the output, and why the output ends there (``""`` if it
    goes on): at most ``room`` tokens (what max new tokens leaves), then cut after the first EOS."""
    ids, reason = list(new_ids), ""
    if len(ids) >= room:
        ids, reason = ids[:room], MAX_NEW_TOKENS
    cut = cut_at_eos(ids, eos)
    return (cut, EOS) if cut and cut[-1] in eos else (ids, reason)
