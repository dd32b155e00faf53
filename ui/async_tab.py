"""The Sync vs async tab: one method drafted-then-verified, and with drafting overlapped with
verification, repeated and interleaved (sync, async, sync, async, ...), as two timelines, with the guesses'
hit rate and a verdict on this machine that the repetitions back."""

from __future__ import annotations

import gradio as gr

from talon.trace import RunTrace
from viz import charts, summary

from .compute import model_work
from .settings import SETTING_NAMES, RunSettings, check, prepare
from .shared import busy_note, gpu_seconds

REPEATS = 3
"""Repetitions of the sync / async pair by default."""
MAX_REPEATS = 5


def check_async(*panel) -> None:
    """``gr.Error`` before anything runs (or the page changes) if the settings ``panel`` (``SETTING_NAMES``)
    cannot run, or have no drafter to overlap."""
    settings = RunSettings.of(panel)
    check(settings)
    if settings.method == "ar":
        raise gr.Error("Autoregressive decoding has no drafter to overlap: pick a tree method.", print_exception=False)


def _async_seconds(repeats, *panel) -> int:
    settings = RunSettings.of(panel[-len(SETTING_NAMES) :])
    return gpu_seconds(settings.max_new, settings.method, runs=2 * max(1, int(repeats or 1)))


@model_work(duration=_async_seconds)
def run_sync_async(repeats, progress=gr.Progress(), *panel):
    """Run the settings ``panel`` (``SETTING_NAMES``) synchronously, then asynchronously, ``repeats`` times
    interleaved, and draw both timelines (the first repetition's)."""
    check_async(*panel)
    settings = RunSettings.of(panel)
    repeats = max(1, min(int(repeats or 1), MAX_REPEATS))
    runs: dict[str, list[RunTrace]] = {"sync": [], "async": []}
    for rep in range(repeats):
        for k, execution in enumerate(("sync", "async")):
            progress((2 * rep + k) / (2 * repeats), desc=f"Repetition {rep + 1} of {repeats}: {execution}...")
            runs[execution].append(prepare(settings.but(execution=execution), progress).run_to_end())
            first = {k: v[0] for k, v in runs.items() if v}
            verdict = summary.async_verdict(first, runs)
            busy = busy_note([], runs["sync"] + runs["async"]) if len(runs["async"]) == repeats else ""
            yield (
                charts.timeline_chart(first, charts.FIRST_TIMELINE_TITLE if repeats > 1 else charts.TIMELINE_TITLE),
                summary.async_table(first, runs),
                verdict + (f"\n\n{busy}" if busy else ""),
            )
