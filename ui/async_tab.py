"""The Sync vs async tab: one method drafted-then-verified, and with drafting overlapped with
verification, repeated and interleaved (sync, async, sync, async, ...), as two timelines, with the guesses'
hit rate and a verdict on this machine that the repetitions back."""

from __future__ import annotations

import gradio as gr

from talon.trace import RunTrace
from viz import charts, summary

from .compute import QUEUE_NOTE_SECONDS, model_work
from .session import Session, stop_tab
from .settings import SETTING_NAMES, RunSettings, check, prepare
from .shared import busy_note, gpu_seconds, refusal
from .table_view import with_decimals

REPEATS = 3
"""Repetitions of the sync / async pair by default."""
MAX_REPEATS = 5


def check_async(*panel) -> None:
    """``gr.Error`` before anything runs (or the page changes) if the settings ``panel`` (``SETTING_NAMES``)
    cannot run, or have no drafter to overlap."""
    settings = RunSettings.of(panel)
    check(settings)
    if settings.method == "ar":
        raise refusal("Autoregressive decoding has no drafter to overlap: pick a tree method.")


def _async_seconds(session, repeats, *panel) -> int:
    settings = RunSettings.of(panel[-len(SETTING_NAMES) :])
    return gpu_seconds(settings.max_new, settings.method, runs=2 * max(1, int(repeats or 1)))


@model_work(duration=_async_seconds)
def run_sync_async(session: Session, repeats, progress=gr.Progress(), *panel):
    """Run the settings ``panel`` (``SETTING_NAMES``) synchronously, then asynchronously, ``repeats`` times
    interleaved, and draw both timelines (the first repetition's).  Stop (``stop_async``, or the tab
    closing) ends it after the step in flight; what the runs that ended say stays on show."""
    check_async(*panel)
    settings = RunSettings.of(panel)
    repeats = max(1, min(int(repeats or 1), MAX_REPEATS))
    stop = session.claim_work("async")
    runs: dict[str, list[RunTrace]] = {"sync": [], "async": []}
    waited: list[float] = []  # per run, seconds its steps waited in the shared queue
    try:
        for rep in range(repeats):
            for k, execution in enumerate(("sync", "async")):
                progress((2 * rep + k) / (2 * repeats), desc=f"Repetition {rep + 1} of {repeats}: {execution}...")
                prepared = prepare(settings.but(execution=execution), progress)
                trace = prepared.run_to_end(stop=stop.is_set)
                if stop.is_set():
                    yield _stopped_view(session, stop, runs)
                    return
                runs[execution].append(trace)
                waited.append(prepared.waited)
                first = {k: v[0] for k, v in runs.items() if v}
                verdict = summary.async_verdict(first, runs)
                busy = busy_note([], runs["sync"] + runs["async"]) if len(runs["async"]) == repeats else ""
                notes = [n for n in (verdict, shared_note(waited), busy) if n]
                yield (
                    charts.timeline_chart(first, charts.FIRST_TIMELINE_TITLE if repeats > 1 else charts.TIMELINE_TITLE),
                    with_decimals(summary.async_table(first, runs), summary.ASYNC_DECIMALS),
                    "\n\n".join(notes),
                )
    finally:
        session.finish_work("async", stop)


def shared_note(waited: list[float]) -> str:
    """A sentence when the runs' steps waited in the shared queue behind other work (``waited``: seconds
    per run), else ``""``: the timeline's clock runs on through those waits, the table's times leave them
    out."""
    total = sum(waited)
    if total < QUEUE_NOTE_SECONDS:
        return ""
    runs = sum(1 for w in waited if w >= QUEUE_NOTE_SECONDS)
    return (
        f"**Shared machine:** {summary.plural(runs, 'run')} waited {total:.1f} s in all between steps while other "
        "work (another tab's or another user's) took its turn. The timeline's clock runs on through those "
        "waits (its gaps); the table's times leave them out."
    )


def _stopped_view(session: Session, stop, runs: dict[str, list[RunTrace]]) -> tuple:
    """What stopped runs leave: nothing changed where a newer Run replaced them (it fills the page); after
    Stop or a closed tab, the view of the runs that ended, its verdict under a note saying so."""
    if session.replaced("async", stop):
        return gr.skip(), gr.skip(), gr.skip()
    note = stopped_note(len(runs["sync"]), len(runs["async"]))
    verdict = summary.async_verdict({k: v[0] for k, v in runs.items() if v}, runs) if runs["async"] else ""
    return gr.update(), gr.update(), note + (f"\n\n{verdict}" if verdict else "")


def stopped_note(sync: int, asynchronous: int) -> str:
    """What Stop leaves on show: the ``sync`` and ``asynchronous`` runs that ended (the one cut short is
    dropped)."""
    if not sync:
        return "**Stopped** before the first run ended: nothing new to compare."
    if not asynchronous:
        return "**Stopped** before the first async run ended: the timeline shows the sync run alone."
    return (
        f"**Stopped**: the table is over the {summary.plural(sync, 'sync run')} and "
        f"{summary.plural(asynchronous, 'async run')} that ended."
    )


def stop_async(session: Session) -> None:
    """Sync vs async's Stop: the runs in flight end after the step they are on."""
    stop_tab(session, "async")
