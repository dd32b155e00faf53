"""Splitting one parametrized test between the tiers: a few cases in the fast tier, the rest with the slow
tier (CI runs both), so the fast tier still reaches every code path in its first minute."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest


def fast_only(fast: Iterable[str], values: Sequence, ids: Sequence[str]) -> list:
    """``values`` as ``pytest.param``s named by ``ids``; those whose id is in ``fast`` run in the fast
    tier, every other one is marked ``slow``."""
    fast = set(fast)
    unknown = fast - set(ids)
    assert not unknown, f"no such case: {sorted(unknown)}"
    return [
        pytest.param(*(v if isinstance(v, tuple) else (v,)), id=i, marks=() if i in fast else pytest.mark.slow)
        for v, i in zip(values, ids, strict=True)
    ]
