"""The Sync vs async tab: one method drafted-then-verified, and with drafting overlapped with
verification, as two timelines, with the guesses' hit rate and a plain verdict on this machine."""

from __future__ import annotations

import gradio as gr

from talon.trace import RunTrace
from viz import charts, summary

from .compute import model_work
from .settings import RunSettings, prepare
from .shared import gpu_seconds


def _async_seconds(*panel) -> int:
    settings = RunSettings.of(panel)
    return gpu_seconds(settings.max_new, settings.method, runs=2)


@model_work(duration=_async_seconds)
def run_sync_async(progress=gr.Progress(), *panel):
    """Run the settings ``panel`` (``SETTING_NAMES``) synchronously, then asynchronously, and draw both
    timelines."""
    settings = RunSettings.of(panel)
    if settings.method == "ar":
        raise gr.Error("Autoregressive decoding has no drafter to overlap: pick a tree method.", print_exception=False)
    traces: dict[str, RunTrace] = {}
    for execution in ("sync", "async"):
        traces[execution] = prepare(settings.but(execution=execution), progress).run_to_end()
        yield charts.timeline_chart(traces), summary.async_table(traces), summary.async_verdict(traces)
