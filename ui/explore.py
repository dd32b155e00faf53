"""The Explore tab: a run streamed as it decodes, each step's tree, the step slider and Play, Stop,
"follow the run", and the run's export and loading.

The decode runs on its own thread (``ui.session.LiveRun``); the page polls it at most ``UPDATE_HZ``
times a second and draws the newest step, so drawing never slows the decoder down beyond sharing the
cores, and one update costs the same whatever the run's length (the text is appended to).
"""

from __future__ import annotations

import html
import re
import tempfile
import textwrap
import time
from pathlib import Path

import gradio as gr

from talon import metrics
from talon.config import GATE_METHODS
from talon.drafters.calibration import Calibration, rows_table
from talon.metrics import plain_share, representative_step, trace_json
from talon.trace import EOS, MAX_NEW_TOKENS, STOPPED, RunTrace, StepRecord
from talon.tree import SOURCE_MODEL
from viz import charts, lab_charts, summary
from viz.summary import plural
from viz.tree_figure import COLOR_MODES, colour_help, colour_mode, tree_figure, tree_html

from . import text_view
from .compute import model_work, waiting_line
from .session import LiveRun, RunStopped, Session
from .settings import SETTING_NAMES, RunSettings, check, prepare, settings_of
from .shared import busy_note, gpu_seconds, refusal, step_number
from .table_view import node_rows
from .tree_lab import frozen_for, gate_view

UPDATE_HZ = 2
"""At most this many page updates a second while a run streams (the newest state wins).  Measured with
``python -m ui.speed`` on the 2-core CPU: app / benchmark tokens/s 0.82-0.85 at 5 a second, 0.84-0.86
at 3, 0.86-0.89 at 2; every step stays on the slider for afterwards."""
NO_RUN = "No run yet: type a prompt and press Run, or load a saved trace."
STOPPED_BEFORE_START = (
    "Stopped before the run's first step (while it was being prepared). A cost curve whose measurement was "
    "stopped is not kept; the next N = auto run measures it again."
)
SHOWN_BEFORE = " The page still shows the run before it."
STOPPED_NOTE = "Stopped before the run's first step: nothing was decoded."
"""The note under Stop after a run stopped while it was prepared (it stays until the next run)."""
END_NOTES = {
    EOS: "the model emitted its end-of-sequence token",
    MAX_NEW_TOKENS: "the max new tokens limit was reached",
    STOPPED: "you pressed Stop",
}


# ---- one step's view ----------------------------------------------------------------------------------
def caption(trace: RunTrace, step: StepRecord) -> str:
    """``Step k of n: ...`` (numbered from 1, like the slider and the figure; "of n so far" while the run
    decodes), and at the last step of a finished run why it ended there."""
    n = len(trace.steps)
    so_far = "" if trace.stop_reason else " so far"  # a run still decoding: n grows while this step stays on show
    text = (
        f"**Step {step.index + 1} of {n}{so_far}**: {summary.step_shape(step)} → "
        f"{plural(len(step.committed_ids), 'token')} committed"
    )
    text += summary.step_note(step)
    text += "  \n" + summary.step_explanation(step, trace.tree_config)
    if step.index == n - 1 and trace.stop_reason:
        cut = len(step.accepted_path) > len(step.committed_ids)
        text += f"  \nThe run ends here: {END_NOTES.get(trace.stop_reason, trace.stop_reason)}" + (
            " (the step's last tokens were cut there)." if cut else "."
        )
    return text


def deepest(trace: RunTrace | None) -> int:
    """The deepest tree of the run so far: every step of a run is drawn on this one depth scale."""
    return max((s.tree.max_depth for s in trace.steps), default=0) if trace else 0


def run_tree_figure(trace: RunTrace, step: StepRecord, color_mode: str):
    """A step's tree on the run's depth scale (so trees of one run compare at a glance)."""
    return tree_figure(step, color_mode, max_depth=deepest(trace))


def step_view(trace: RunTrace | None, number, color_mode: str, run_id: int = 0):
    """Figure, text highlight, node table and caption for step ``number`` (from 1) of ``trace``."""
    if trace is None or not trace.steps:
        return None, text_view.EMPTY, None, NO_RUN
    number = step_number(number, trace)
    step = trace.steps[number - 1]
    mode = colour_mode(color_mode)
    return (
        run_tree_figure(trace, step, mode),
        text_view.highlight(run_id, number),
        node_rows(step),
        caption(trace, step),
    )


def run_kind(trace: RunTrace) -> str:
    """A run's method as a sentence names it, with its article: "an autoregressive", "a TALON", "an EAGLE-2"."""
    method = str(trace.tree_config.get("method", "?"))
    name = summary.METHOD_NAMES.get(method, method)
    return f"{'an' if name[:1].lower() in 'aeiou' else 'a'} {name}"


def opening_step(trace: RunTrace) -> int:
    """The step (from 1) a finished run opens on: a representative one (median depth, not the often
    truncated last step: ``talon.metrics.representative_step``), among the steps that drafted where the
    typical step is a plain one (a run of mostly plain steps would open on a tree of one root)."""
    number = representative_step(trace.steps) + 1
    drafted = [s for s in trace.steps if s.tree.num_drafts]
    if drafted and not trace.steps[number - 1].tree.num_drafts:
        number = representative_step(drafted) + 1
    return number


def opening_note(trace: RunTrace, number: int) -> str:
    """A line under the caption saying why the view opened on this step."""
    n = len(trace.steps)
    if n < 2:
        return ""
    if number == opening_step(trace) != representative_step(trace.steps) + 1:  # the typical step is a plain one
        return (
            f"*Opened on step {number}: a typical tree among the steps that drafted; {plain_share(trace.steps):.0%} "
            "of this run's steps were plain decoding steps (no tree paid for its verification: the root and "
            f"the bonus token only). {deepest_note(trace).capitalize()}. Move the slider to see any step.*"
        )
    if number == n:
        return ""
    if deepest(trace) == 0:
        return (
            f"*Opened on step {number} of {n}: no step of this run drafted, so every step shows its root and the "
            "target's next token. Move the slider to see any step.*"
        )
    return (
        f"*Opened on step {number}: a typical tree of this run (median depth, {deepest_note(trace)}); "
        f"the run's last step is {n}, often cut short by the end of the run. Move the slider to see any step.*"
    )


def opening_view(trace: RunTrace, color_mode: str, run_id: int) -> tuple:
    """The step number, figure, node table and caption (with ``opening_note``) of the step a finished run
    opens on; step 1's empty view for a trace without steps."""
    number = opening_step(trace) if trace.steps else 1
    fig, _, table, cap = step_view(trace, number, color_mode, run_id)
    note = opening_note(trace, number)
    return number, fig, table, cap + ("  \n" + note if note else "")


def deepest_note(trace: RunTrace) -> str:
    d = deepest(trace)
    if d == 0:
        return "no step drafted: every tree is its root, and the column after it the target's next token"
    layers = "draft layer 1" if d == 1 else f"draft layers 1 to {d}"
    return f"all trees drawn on one depth scale: {layers}, and the bonus token's column {d + 1}"


def slider_update(trace: RunTrace | None, value: int | None = None, follow: bool = True) -> dict:
    """The step slider (1 .. steps); ``value`` None keeps the user's position unless following."""
    n = len(trace.steps) if trace else 0
    update = {"minimum": 1, "maximum": max(n, 2), "interactive": n > 1}  # a slider needs max > min
    if value is not None:
        update["value"] = value
    elif follow:
        update["value"] = max(n, 1)
    return gr.update(**update)


def colour_choices(trace: RunTrace | None, current: str) -> dict:
    """The colour modes this run can show, and a line on those it cannot (source: only a hybrid run
    has nodes from two sources)."""
    sources = {src for s in (trace.steps if trace else []) for src in s.tree.source[1:]}
    modes = [m for m in COLOR_MODES if m != "source" or len(sources) > 1]
    info = colour_help(modes)
    if "source" not in modes and not sources:  # no run yet (or no drafts)
        info += ". (Source colours need a hybrid run.)"
    elif "source" not in modes:
        info += (
            ". (Source colours need a hybrid run: every node here came from "
            + ("the model" if sources <= {SOURCE_MODEL} else "one source")
            + ".)"
        )
    return gr.update(choices=modes, value=current if current in modes else "verdict", info=info)


CHART_COUNT = 8
"""Outputs of the Charts tab (``charts_of``)."""


def charts_of(trace: RunTrace | None) -> tuple:
    """The Charts tab: committed tokens, acceptance per depth (both rates), tree shape, timing, timeline,
    adaptation, and the two calibration charts (``calibration_figures``)."""
    if trace is None:
        return (None,) * CHART_COUNT
    figs = charts.run_charts(trace)
    return (
        figs["committed"],
        figs["acceptance"],
        figs["shape"],
        figs["timing"],
        charts.timeline_chart({"run": trace}),
        lab_charts.adaptation_figure({trace.tree_config.get("method", "run"): trace}),
        *calibration_figures(trace),
    )


def _streaming_rest(follow: bool, caption_value, status: str) -> tuple:
    """Node table, caption, status, colour radio and charts while a run streams.  The charts, and when
    following the node table (in a closed accordion), stay empty until the run ends: plain None values,
    because every ``gr.update()`` output makes Gradio rebuild that component's config (about a
    millisecond each, on the thread the decoder shares).  Not following, the table of the step the user
    looks at stays."""
    return (None if follow else gr.update(), caption_value, status, gr.update(), *(None,) * CHART_COUNT)


def running_line(steps: int, tokens: int, seconds: float, live: LiveRun | None = None) -> str:
    """A one-line status while the run streams, from running counts (its cost does not grow with the run).
    ``seconds``: the prefill plus the steps' own time so far, the summary's definition of the run's wall
    time (``RunTrace.seconds``), so the streamed rate and the final one agree."""
    line = (
        f"Running: {plural(steps, 'step')}, {plural(tokens, 'token')} so far, "
        f"{tokens / seconds if seconds > 0 else 0:.1f} tokens/s (generated ÷ prefill + steps)"
    )
    if live is not None and live.waits:
        line += (
            f"; the machine is shared: {plural(live.waits, 'step')} waited for other users' work, "
            f"{live.waited:.1f} s in all (not counted in tokens/s)"
        )
    return line + "..."


def waiting_status(live: LiveRun, started: float) -> str:
    """What the page says before the first step arrives: queued behind other work, or reading the prompt."""
    ticket = live.ticket
    if ticket is not None and ticket.started_at is None:
        return waiting_line(ticket)
    tokens = len(live.trace.prompt_ids)
    seconds = time.perf_counter() - started
    return f"Reading the prompt ({plural(tokens, 'token')}) and drafting the first tree: {seconds:.0f} s..."


def calibrated_confidences(trace: RunTrace) -> dict[tuple[int, int], float]:
    """Per checked node ``(step index, node)``: the calibrated probability the run's cost rule had for it
    when the step was drafted (the drafter's prior the trace records, then the run's own verdicts up to the
    step before, learned online exactly as ``talon.drafters.calibration.Calibration`` does in the decoding
    loop).  A prior a hand-edited trace garbled is left out: the charts then start from the raw confidence."""
    try:
        prior = rows_table(trace.calibration_prior) if trace.calibration_prior else None
    except (KeyError, TypeError, ValueError):
        prior = None
    calibration = Calibration(prior)
    out = {}
    for step in trace.steps:
        on_path = set(step.accepted_path)
        given = calibration.given_parents(step.tree)
        for node in range(1, len(step.tree)):
            if step.tree.parent[node] in on_path:
                out[(step.index, node)] = given[node]
        calibration.observe(step.tree, step)
    return out


def calibration_figures(trace: RunTrace) -> tuple:
    """Reliability charts from the run's own verdicts: the draft probability (raw, and as calibrated by
    the run's online calibration) against the share of checked nodes accepted; the path probability
    against the share of paths accepted whole."""
    table = calibrated_confidences(trace)
    raw = metrics.reliability_table(metrics.reliability_points(trace.steps, "draft"))
    calibrated = metrics.reliability_table(
        metrics.reliability_points(trace.steps, "draft", lambda s, node: table[(s.index, node)])
    )
    path = metrics.reliability_table(metrics.reliability_points(trace.steps, "path"))
    return (
        charts.reliability_chart(
            {"draft probability (raw)": raw, "calibrated (the run's own, learned online)": calibrated},
            "Calibration per depth: draft probability vs share accepted",
            "claimed P(accepted | parent accepted), over the nodes the target checked",
            "share accepted",
        ),
        charts.reliability_chart(
            {"path probability": path},
            "Calibration per depth: path probability vs whole path accepted",
            "path probability (product of draft probabilities), over every draft node",
            "share of paths accepted",
        ),
    )


# ---- run, stop, follow ------------------------------------------------------------------------------------
def check_run(*panel) -> None:
    """Refuse the settings ``panel`` (``SETTING_NAMES``) before anything on the page changes (``gr.Error``
    says what to fix; the previous run, its gate and the Tree lab stay as they were)."""
    check(RunSettings.of(panel))


def _explore_seconds(session, color_mode, *panel) -> int:
    settings = RunSettings.of(panel[-len(SETTING_NAMES) :])
    return gpu_seconds(settings.max_new, settings.method)


@model_work(duration=_explore_seconds)
def run_explore(session: Session, color_mode, progress=gr.Progress(), *panel):
    """Start the decode of the settings ``panel`` (``SETTING_NAMES``) and stream its newest step to the
    page, at most ``UPDATE_HZ`` updates a second (each step is a job of the shared queue); when it ends
    (or Stop ends it) draw the summary and charts and open a representative step."""
    color_mode = colour_mode(color_mode)
    settings = RunSettings.of(panel)
    session.stop_note = ""
    session.runs_started += 1
    mine = session.runs_started
    try:
        with session.preparing() as stop:
            prepared = prepare(settings, progress, stop=stop.is_set)
    except RunStopped:
        newer = session.starting_pressed and session.starting is not stop  # Run pressed again: it comes next
        if session.runs_started == mine and not newer:  # Stop pressed; a newer run has its own note
            session.stop_note = STOPPED_NOTE
            gr.Info(STOPPED_BEFORE_START + (SHOWN_BEFORE if session.trace is not None else ""))
        yield (gr.skip(),) * (7 + CHART_COUNT)  # the page keeps the run it shows
        return
    live = LiveRun(prepared.trace, prepared.target, prepared.drafter, prepared.tree_cfg, prepared.decode_cfg, stop=stop)
    session.trace, session.live, session.lab, session.starting = prepared.trace, live, None, None
    session.lab_results = False
    session.text_run = live.id
    session.viewed_step = None
    session.specs = (settings.target_spec, settings.drafter_spec)
    trace = live.trace
    shown, tokens, seconds, last_update, started = 0, 0, 0.0, 0.0, time.perf_counter()
    yield (
        slider_update(trace),
        None,
        text_view.pieces(live.id, []),
        None,
        "Starting...",
        "Running...",
        colour_choices(None, color_mode),
        *charts_of(None),
    )
    while not live.done:
        live.wait(1.0 / UPDATE_HZ)
        pause = 1.0 / UPDATE_HZ - (time.perf_counter() - last_update)
        if pause > 0:
            live.wait_end(pause)
        if session.live is not live:  # a loaded trace or a newer run is on show now: leave the page to it
            return
        n = len(trace.steps)
        if n == shown:
            if n == 0 and not live.done:  # the prefill of a long prompt, or a queue: say so
                last_update = time.perf_counter()
                yield (
                    gr.update(),
                    gr.update(),
                    text_view.pieces(live.id, []),
                    *_streaming_rest(True, gr.update(), waiting_status(live, started)),
                )
            continue
        live.fill_texts(n)
        new_steps, shown = trace.steps[shown:n], n
        tokens += sum(len(s.committed_ids) for s in new_steps)
        seconds += sum(s.step_seconds for s in new_steps)
        status = running_line(n, tokens, trace.prefill_seconds + seconds, live)
        last_update = time.perf_counter()
        if session.follow:
            fig, cap = run_tree_figure(trace, trace.steps[n - 1], color_mode), caption(trace, trace.steps[n - 1])
            yield (
                slider_update(trace, n),
                fig,
                text_view.pieces(live.id, new_steps, n),
                *_streaming_rest(True, cap, status),
            )
        else:
            yield (
                slider_update(trace, follow=False),
                gr.update(),
                text_view.pieces(live.id, new_steps),
                *_streaming_rest(False, gr.update(), status),
            )
    live.join()
    if session.live is not live:  # replaced while it ended (a trace loaded, Run pressed again)
        return
    if live.error is not None:
        raise refusal(f"The run failed: {live.error}")
    live.fill_texts()
    yield finished_view(session, trace, live, color_mode)


def finished_view(session: Session, trace: RunTrace, live: LiveRun, color_mode: str) -> tuple:
    """The page when a run has ended: a representative step; or where the run was not followed and the user
    moved to a step while it ran, that step drawn again from the finished run (its caption counts the run's
    steps, no longer "so far"); or where Stop ended a run being followed, its last step, the one on show when
    Stop was pressed; the summary and charts."""
    n = len(trace.steps)
    if not n:
        return (
            slider_update(trace),
            None,
            text_view.EMPTY,
            None,
            "Stopped before the first step.",
            summary.summary_markdown(trace),
            colour_choices(trace, color_mode),
            *charts_of(trace),
        )
    if session.follow:  # Stop pressed: the step being watched (whole: the run ends after it) stays on show
        viewed = n if trace.stop_reason == STOPPED else None
    else:
        viewed = session.viewed_step
    if viewed is None:
        number, fig, table, cap = opening_view(trace, color_mode, live.id)
    else:
        number = step_number(viewed, trace)
        fig, _, table, cap = step_view(trace, number, color_mode, live.id)
    queue_note = (
        f"\n\n*The machine was shared during this run: {plural(live.waits, 'step')} waited for other users' "
        f"work ({live.waited:.1f} s in all), which the time above leaves out.*"
        if live.waits
        else ""
    )
    busy = busy_note([], [trace])
    return (
        slider_update(trace, number),
        fig,
        text_view.pieces(live.id, trace.steps, number),
        table,
        cap,
        summary.summary_markdown(trace) + queue_note + (f"\n\n{busy}" if busy else ""),
        colour_choices(trace, color_mode),
        *charts_of(trace),
    )


def note_after_run(session: Session) -> str:
    """The note under Stop when a run has ended: empty, unless it was stopped before its first step."""
    return session.stop_note


def stop_run(session: Session) -> str:
    """Stop the run in flight through the engine's stop hook (it ends after the step it is on)."""
    stopped = session.stop()
    if stopped == "preparing":
        return "Stopping: the run ends before its first step (a cost curve being measured is not kept)."
    return "Stopping after this step..." if stopped else "Nothing is running."


def set_follow(session: Session, follow: bool) -> None:
    session.follow = bool(follow)


# ---- walking through a run ------------------------------------------------------------------------------
def show_step(session: Session, number, color_mode):
    """Draw step ``number`` (from 1) of the session's run (and remember it: ``Session.viewed_step``)."""
    if session.trace is not None and session.trace.steps:
        session.viewed_step = step_number(number, session.trace)
    return step_view(session.trace, number, color_mode, session.text_run)


PLAY_SPEEDS = (("2 s", 2.0), ("1 s", 1.0), ("0.5 s", 0.5), ("0.25 s", 0.25))
"""Play's speeds (label, seconds between steps): slow enough to talk a class through each tree, fast enough to
see a long run's shapes change."""


def _seconds_a_step(speed) -> float:
    """``speed`` (seconds between steps, as the dropdown sends it) as a float, one second if unreadable."""
    try:
        seconds = float(speed)
    except (TypeError, ValueError):
        return 1.0
    return seconds if seconds > 0 else 1.0


PLAY_LABEL, PLAYING_LABEL = "▶ Play", "▶ Playing…"
"""Play's label, and its label while Play steps through the run (Pause stops it)."""


def play_button(playing: bool) -> dict:
    """Play's label for ``playing``: it says so while the run is being played."""
    return gr.update(value=PLAYING_LABEL if playing else PLAY_LABEL)


def _not_moved(caption=None) -> tuple:
    """Play's outputs where no step is shown: nothing moved (``caption``: a note instead), Play reads "Play"
    and the timer is off."""
    shown = gr.update() if caption is None else caption
    return (*(gr.update(),) * 4, shown, play_button(False), gr.Timer(active=False))


def _play_frame(session: Session, number: int, color_mode: str, timer_active: bool, speed=1.0):
    fig, text, table, cap = show_step(session, number, color_mode)
    timer = gr.Timer(_seconds_a_step(speed), active=timer_active)
    return number, fig, text, table, cap, play_button(timer_active), timer


NOTHING_TO_PLAY = "Nothing to play yet: press Run (or load a saved trace in Export / load), then Play."
PLAY_WHILE_RUNNING = "The run is still going and shows each step as it comes: press Play when it has ended."


def _streaming(session: Session) -> bool:
    """Whether the run on show is still decoding."""
    return session.live is not None and not session.live.done and session.trace is session.live.trace


def play(session: Session, number, color_mode, speed=1.0):
    """Start playing from the step on show, or from step 1 when it is the last one, a step every ``speed``
    seconds (``PLAY_SPEEDS``)."""
    trace = session.trace
    if trace is None or not trace.steps:
        gr.Info(NOTHING_TO_PLAY)
        return _not_moved(NO_RUN)
    if _streaming(session):  # the stream moves the step on show itself, and its steps' texts are not filled
        gr.Info(PLAY_WHILE_RUNNING)
        return _not_moved()
    number = int(number or 1)
    start = 1 if number >= len(trace.steps) else number
    session.playing = len(trace.steps) > 1
    return _play_frame(session, start, color_mode, session.playing, speed)


def play_speed(session: Session, speed):
    """A new Play speed: the timer's interval, taking effect at once when playing."""
    return gr.Timer(_seconds_a_step(speed), active=session.playing)


def pause(session: Session):
    """Pause: the timer stops, Play reads "Play" again, and a tick already on its way steps no further
    (``advance``)."""
    session.playing = False
    return play_button(False), gr.Timer(active=False)


def advance(session: Session, number, color_mode, speed=1.0):
    """Play: one step on (the timer keeps ``speed``, seconds a step); the timer stops at the last step, or
    when Pause was pressed."""
    trace = session.trace
    if not session.playing or trace is None or not trace.steps or _streaming(session):
        session.playing = False
        return _not_moved()
    nxt = min(int(number or 1) + 1, len(trace.steps))
    session.playing = nxt < len(trace.steps)
    return _play_frame(session, nxt, color_mode, session.playing, speed)


# ---- export and load ---------------------------------------------------------------------------------
def check_trace(session: Session, what: str = "to export") -> None:
    """``gr.Error`` unless the session holds a run or loaded trace with steps (``what``: what there is not)."""
    if session.trace is None or not session.trace.steps:
        raise refusal(f"Nothing {what} yet: run or load a trace first.")


def check_ended(session: Session, then: str = "export it", what: str = "to export") -> None:
    """``gr.Error`` unless the session holds a trace whose run has ended (``then``: what to do then)."""
    check_trace(session, what)
    if session.live is not None and not session.live.done:
        raise refusal(f"The run is still going: {then} when it has ended (or press Stop).")


def check_gate(session: Session) -> None:
    """``gr.Error`` unless there is an ended run whose gate can be shown."""
    check_ended(session, "ask why a tree has its shape", "to explain")


def export_name(trace: RunTrace, suffix: str) -> str:
    """A download's file name: the run's method, ``suffix`` (e.g. ``"step3.html"``) and when it was saved,
    so that a browser's downloads of several runs keep apart."""
    method = re.sub(r"[^A-Za-z0-9]+", "-", str(trace.tree_config.get("method") or "run"))
    app_and_method = "talon" if method == "talon" else f"talon_{method}"  # not talon_talon_...
    return f"{app_and_method}_{time.strftime('%Y%m%d-%H%M%S')}_{suffix}"


def page_title(trace: RunTrace, number: int) -> str:
    """An exported tree's ``<title>``: the step and the prompt's first words (cut between words)."""
    return f"TALON tree, step {number} of {len(trace.steps)}: {textwrap.shorten(trace.prompt, 80, placeholder='…')}"


def export_json(session: Session) -> str:
    check_ended(session)
    trace = session.trace
    path = Path(tempfile.mkdtemp(prefix="talon-")) / export_name(trace, "trace.json")
    path.write_text(trace_json(trace, indent=1), encoding="utf-8")
    return str(path)


def export_html(session: Session, number, color_mode) -> str:
    """The tree on show as a standalone HTML page, titled with the prompt and the run's settings."""
    check_trace(session)
    trace = session.trace
    number = step_number(number, trace)
    path = Path(tempfile.mkdtemp(prefix="talon-")) / export_name(trace, f"step{number}.html")
    mode = colour_mode(color_mode)
    step = trace.steps[number - 1]
    page = tree_html(
        step,
        mode,
        max_depth=deepest(trace),
        page_title=page_title(trace, number),
        heading=html_heading(trace, step),
    )
    path.write_text(page, encoding="utf-8")
    return str(path)


def html_heading(trace: RunTrace, step: StepRecord) -> str:
    """The exported page's heading (HTML): the prompt, the settings, and the step's caption text."""
    prompt = html.escape(trace.prompt if len(trace.prompt) <= 600 else trace.prompt[:600] + "…")
    return (
        f"<h2>Step {step.index + 1} of {len(trace.steps)}</h2>"
        f"<p><b>Prompt:</b> <span style='white-space:pre-wrap'>{prompt}</span></p>"
        f"<p><b>Settings:</b> {html.escape(summary.settings_line(trace))}</p>"
        f"<p>{html.escape(summary.growth_sentence(step, trace.tree_config))}; stopped: "
        f"{html.escape(summary.stop_sentence(step, trace.tree_config))}.</p>"
    )


# ---- the gate of a step, without the lab --------------------------------------------------------------------
@model_work()
def show_gate(session: Session, number, target_spec, drafter_spec, progress=gr.Progress()):
    """TALON's gate at step ``number`` (from 1) of the run on show, one click from the tree: the step is
    frozen in the background (``ui.tree_lab.frozen_for``, shared with the Tree lab, which then opens on
    it), its tree rebuilt with the run's own settings, and the gate drawn layer by layer.  Returns the
    gate figure (shown) and a line saying whether the rebuilt tree is the run's."""
    check_gate(session)
    trace = session.trace
    method = trace.tree_config.get("method")
    if method not in GATE_METHODS:
        return gr.update(value=None, visible=False), (
            f"This run used {summary.METHOD_NAMES.get(method, method)}, which has no confidence gate: its caption "
            "says how each tree was grown. Pick TALON (or hybrid) to see the gate."
        )
    number = step_number(number, trace)
    state = frozen_for(session, number, target_spec, drafter_spec, progress)
    session.gate_step = number
    return gate_view(state, trace, number)


def hide_gate():
    """The gate panel hidden and its note cleared (a new run or a loaded trace replaces the one it explained)."""
    return gr.update(value=None, visible=False), ""


def hide_moved_gate(session: Session, number):
    """``hide_gate`` where step ``number`` (from 1), now on show, is not the one the gate explains (moved to,
    or played past); nothing changes where it is (a step set again to the same one)."""
    try:
        same = session.gate_step is not None and int(number) == session.gate_step
    except (TypeError, ValueError):
        same = False
    if same:
        return gr.skip(), gr.skip()
    session.gate_step = None
    return hide_gate()


def read_trace(file) -> RunTrace:
    """The trace in an uploaded ``file`` (a path or a file object); ``gr.Error`` saying what to load
    instead when there is none or it is not one."""
    if file is None:
        raise refusal("Choose a trace JSON file first.")
    try:
        trace = RunTrace.from_json(Path(file if isinstance(file, str) else file.name).read_text(encoding="utf-8"))
    except UnicodeDecodeError:
        reason = "it is not text"
    except (ValueError, OSError) as err:
        reason = str(err)
    else:
        if trace.steps:
            return trace
        reason = "it holds no decoding step (every view draws a step)"
    raise refusal(
        f"That file is not a TALON trace: {reason}. Load a file saved with 'Export trace (JSON)' on this tab."
    )


def check_trace_file(file) -> None:
    """Refuse an upload that is not a trace before anything on the page changes (the panel and the run
    on show stay as they were)."""
    read_trace(file)


def load_trace(session: Session, file, color_mode):
    """Load a saved trace: on show at the step a finished run opens on (``opening_step``, with its note),
    its prompt and settings back in the panel, and a line saying what was loaded."""
    trace = read_trace(file)
    session.stop()
    session.trace, session.live, session.lab, session.specs = trace, None, None, None
    session.lab_results = False
    run_id = session.text_run = -int(time.time() * 1000)  # a new text run
    number, fig, table, cap = opening_view(trace, color_mode, run_id)  # as the finished run opened
    settings = settings_of(trace)
    loaded = (
        f"Loaded {run_kind(trace)} run of {plural(len(trace.steps), 'step')} "
        f"({len(trace.output_ids)} tokens) made with {trace.target}"
        + (f" and {trace.drafter}" if trace.drafter else "")
        + f" on {trace.device}; its prompt and settings "
        "are back in the panel (the model fields keep what you typed: a trace names models, not paths)."
    )
    restored = [settings[name] if settings.get(name) is not None else gr.update() for name in SETTING_NAMES]
    return (
        *restored,
        slider_update(trace, number),
        fig,
        text_view.pieces(run_id, trace.steps, number),
        table,
        cap,
        summary.summary_markdown(trace),
        colour_choices(trace, color_mode),
        *charts_of(trace),
        loaded,
    )
