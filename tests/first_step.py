"""The first step of a fresh decode at a context, the reference a frozen step (the Tree lab) is checked
against."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from talon.config import DecodeConfig, TreeConfig
from talon.drafters.base import Drafter
from talon.engine.decode import new_trace, run
from talon.models.loaded import LoadedModel
from talon.trace import StepRecord


def first_step(
    target: LoadedModel,
    drafter: Drafter,
    cfg: TreeConfig,
    context: Sequence[int],
    decode: DecodeConfig | None = None,
) -> StepRecord:
    """Step 0 of a decode of ``cfg`` started at ``context`` (as its prompt).  The run has room for ``cfg``'s
    deepest tree (a run's last steps draft no deeper than the tokens it has left; the lab's trees have no
    such limit) and stops after the one step."""
    deepest = max(cfg.budget, cfg.gamma, cfg.depth)
    decode = dataclasses.replace(decode or DecodeConfig(), max_new_tokens=deepest + 1)
    trace = new_trace(target, drafter, cfg, decode, "", prompt_ids=context)
    for _ in run(trace, target, drafter, cfg, decode, stop=lambda: bool(trace.steps)):
        pass
    return trace.steps[0]
