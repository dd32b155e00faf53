"""The Compare tab: the same prompt and settings decoded autoregressively, with method A and with
method B; the two trees are shown at the same *output position* (the step of A and the step of B that
committed that token), one above the other, with the three runs side by side in a table."""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

import gradio as gr

from talon.config import ConfigError
from talon.trace import RunTrace
from viz import lab_charts, summary
from viz.tree_figure import COLOR_MODES, shared_extent, tree_figure

from .compute import model_work
from .session import Session
from .settings import SETTING_NAMES, RunSettings, prepare
from .shared import SHORT_LABEL, gpu_seconds

NO_COMPARE = "Press **Run comparison** to decode the prompt with both methods."


def step_at(trace: RunTrace, position: int) -> int:
    """The index of the step of ``trace`` that committed output token ``position`` (from 1); the last
    step for a position past the end."""
    ends = list(accumulate(len(s.committed_ids) for s in trace.steps))
    return min(bisect_left(ends, position), len(trace.steps) - 1)


def first_position(trace: RunTrace, index: int) -> int:
    """The output position (from 1) of the first token step ``index`` committed."""
    return sum(len(s.committed_ids) for s in trace.steps[:index]) + 1


def compare_view(session: Session, position, color_mode):
    """Both trees at output token ``position``, on the same axes, the runs' table, and the step numbers
    (from 1) of A and B on show, for the "go to step" boxes."""
    traces = session.compare
    a, b = traces.get("A"), traces.get("B")
    runs = [t for t in (a, b) if t is not None and t.steps]
    if not runs:
        return gr.update(), None, None, None, NO_COMPARE, None, gr.update(), gr.update()
    length = min(len(t.output_ids) for t in runs) or 1
    position = max(1, min(int(position or length), length))
    steps = [t.steps[step_at(t, position)] for t in runs]
    depth, width = shared_extent(steps)
    mode = color_mode if color_mode in COLOR_MODES else "verdict"
    figs, numbers = [], []
    for label, trace in (("A", a), ("B", b)):
        if trace is None or not trace.steps:
            figs.append(None)
            numbers.append(gr.update())
            continue
        step = trace.steps[step_at(trace, position)]
        numbers.append(step.index + 1)
        start = first_position(trace, step.index)
        title = (
            f"{label}: {SHORT_LABEL.get(trace.tree_config['method'])} · step {step.index + 1} of "
            f"{len(trace.steps)} · tokens {start}–{start + len(step.committed_ids) - 1}"
        )
        figs.append(tree_figure(step, mode, title=title, max_depth=depth, max_width=width))
    token = runs[0].output_text and _token_text(runs[0], position)
    caption = f"Output token {position} of {length} (“{token}”): the step of each run that committed it."
    slider = gr.update(minimum=1, maximum=max(length, 2), value=position, interactive=length > 1)
    labelled = {f"{k}: {SHORT_LABEL.get(t.tree_config['method'])}": t for k, t in traces.items() if t.steps}
    table = summary.comparison_table(labelled, traces["ar"].seconds if "ar" in traces else None)
    adaptation = lab_charts.adaptation_figure(
        {f"{k}: {SHORT_LABEL.get(t.tree_config['method'])}": t for k, t in traces.items() if k != "ar"}
    )
    return slider, figs[0], figs[1], table, caption, adaptation, *numbers


def _token_text(trace: RunTrace, position: int) -> str:
    step = trace.steps[step_at(trace, position)]
    offset = position - first_position(trace, step.index)
    texts = [step.node_text[i] for i in step.accepted_path[1:]] + [step.target_text[step.accepted_path[-1]]]
    return texts[offset] if 0 <= offset < len(texts) else ""


def go_to_step(session: Session, which: str, number, color_mode):
    """The view at the first token of step ``number`` (from 1) of run A or B."""
    trace = session.compare.get(which)
    if trace is None or not trace.steps:
        raise gr.Error("Run the comparison first.", print_exception=False)
    index = max(1, min(int(number or 1), len(trace.steps))) - 1
    return compare_view(session, first_position(trace, index), color_mode)


def _compare_seconds(session, method_a, method_b, color_mode, *panel) -> int:
    return gpu_seconds(RunSettings.of(panel[-len(SETTING_NAMES) :]).max_new, "talon", runs=3)


@model_work(duration=_compare_seconds)
def run_compare(session: Session, method_a, method_b, color_mode, progress=gr.Progress(), *panel):
    """Decode the settings ``panel`` (``SETTING_NAMES``; its method is replaced) autoregressively (for the
    speedup), then with method A, then with method B; both methods' settings are checked before
    anything runs."""
    settings = RunSettings.of(panel)
    for label, method in (("A", method_a), ("B", method_b)):
        try:
            settings.but(method=method).configs()
        except ConfigError as err:
            raise gr.Error(f"Method {label}: {err}", print_exception=False) from None
    session.compare = {}
    for label, method in (("ar", "ar"), ("A", method_a), ("B", method_b)):
        prepared = prepare(settings.but(method=method), progress)
        progress(0.0, desc=f"Running {'autoregressive decoding' if label == 'ar' else 'method ' + label}...")
        session.compare[label] = prepared.run_to_end()
        if label != "ar":
            yield compare_view(session, 1, color_mode)
    a = session.compare["A"]
    yield compare_view(session, first_position(a, len(a.steps) // 2) if a.steps else 1, color_mode)
