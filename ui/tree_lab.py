"""The Tree lab tab: freeze a step of the run on show, then every change of method, N, K, mu, depth or
gamma rebuilds that step's tree at the same context and verifies it with one target forward
(``talon.engine.frozen_step.FrozenStep``), without re-running the generation; the price of a tree against
N at that step (this machine's cost curve, or another measured device's as a projection).

The frozen step's caches live in the user's session (one frozen step at a time) and go with it.  Every
piece of model work is a job of the shared queue (``ui.compute.COMPUTE``): a change is an ``INTERACTIVE``
job, which runs before any waiting decode step, and a sweep's or price chart's trees are ``STEP`` jobs, one
per tree, which take turns with other users' decodes."""

from __future__ import annotations

from functools import partial

import gradio as gr
import pandas as pd

from talon.config import (
    AUTO_METHODS,
    BUDGET_METHODS,
    GATE_METHODS,
    METHOD_NAMES,
    ROOT_WIDTH_METHODS,
    ConfigError,
    TreeConfig,
)
from talon.engine.cost_measure import NOT_KEPT
from talon.engine.decode import Replay, replay, replayable, run_settings
from talon.engine.frozen_step import LAB_METHODS, FrozenStep
from talon.models.token_text import token_label
from talon.runtime.cost_curve import CostCurve
from talon.trace import RunTrace, StepRecord
from talon.tree import CUT_BY_COST
from viz import bench_charts, lab_charts
from viz.summary import plural, step_shape, stop_sentence, tree_parts
from viz.tree_figure import (
    COLOR_MODES,
    colour_help,
    colour_mode,
    committed_label,
    tree_figure,
    visible_text,
)

from .compute import COMPUTE, INTERACTIVE, STEP, model_work, waited_note, waiting_line
from .progress_bar import reporter
from .session import LabState, Session
from .settings import budget_setting, tree_config
from .shared import (
    BUSY_STEP_RATIO,
    DEFAULT_DRAFTER,
    REGISTRY,
    bench_root,
    cost_model,
    load_target,
    make_drafter,
    measured_curves,
    refusal,
    shown_path,
    step_number,
)
from .table_view import node_rows, with_decimals

LAB_METHOD_CHOICES = [
    ("TALON", "talon"),
    ("EAGLE-2", "eagle2"),
    ("static tree", "static"),
    ("chain", "chain"),
    ("hybrid (TALON over model + prompt lookup)", "hybrid"),
]
NOT_FROZEN = (
    "No step frozen yet: run (or load) a trace in Explore; the step box follows the step on show there. "
    "Press **Freeze this step**."
)
REROLLS = 200
AUTO_RUN_LAB_BUDGET = 24
"""The lab's budget N (draft nodes) when it freezes a step of an auto-sized run (the lab builds trees of a
fixed N; its price chart shows the N the cost rule picks) or of a run without a budget (plain decoding, the
chain: their panel's N was not the run's)."""
LIMIT_NOTE_DEPTH = 8
"""The frozen step's status line mentions the run's end from a depth limit below this (layers)."""
SWEEP_VALUES = {
    "budget": (4, 8, 12, 16, 24, 32, 48, 64, 96, 128),
    "mu": (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0),
    "topk": (0, 1, 2, 4, 6, 8, 10, 16),
}
"""The values each "Sweep at this step" field takes (``topk`` 0: the gate picks the root's children)."""
PRICE_BUDGETS = (1, 2, 4, 6, 8, 12, 16, 24, 32, 48, 64, 96, 128)
"""The N of the price chart (draft nodes)."""
THIS_MACHINE = "this machine"
"""The price chart's choice for this machine's own cost curve (the run's, else measured here)."""


NO_RESULTS = (None, None, "", None, None, "")
"""The lab's results emptied: the sweep, the price chart and its note, the re-rolls, their table and note."""


def unfrozen() -> tuple:
    """The lab as it opens, for a new run or a loaded trace (the step it held belonged to the run before):
    the status line, an empty tree and caption, the gate chart hidden, empty node and methods tables, and
    ``NO_RESULTS``."""
    return NOT_FROZEN, None, "", gr.update(value=None, visible=False), None, None, *NO_RESULTS


RESULTS_OUTDATED = (
    "*The lab's settings changed: the sweep, price chart and re-rolls drawn at the old ones were cleared. "
    "Draw them again for these.*"
)


def results_outdated(session: Session) -> tuple:
    """When a lab setting changes: the sweep, the price chart and its note, the re-rolls, their table and
    note drawn at the old settings are cleared, the note saying why (nothing changes where none are on
    show), and those still being drawn are dropped when they end (``_still_current``)."""
    session.lab_version += 1
    if not session.lab_results:
        return (gr.skip(),) * 6
    session.lab_results = False
    return None, None, RESULTS_OUTDATED, None, None, ""


def results_cleared(session: Session) -> tuple:
    """After a step is frozen: what was drawn for the step before (sweep, price chart and note, re-rolls,
    their table and note) is cleared, and what is still being drawn for it is dropped when it ends."""
    session.lab_version += 1
    session.lab_results = False
    return NO_RESULTS


def _still_current(session: Session, version: int) -> bool:
    """Whether a lab result begun at ``version`` (``Session.lab_version``) is for what the lab shows now;
    if so, it counts as on show."""
    if session.lab_version != version:
        return False
    session.lab_results = True
    return True


def results_after_gate(session: Session) -> tuple:
    """After Explore's gate: ``results_cleared`` where it froze a step of the run, else nothing changes."""
    return results_cleared(session) if holds_run_step(session) else (gr.skip(),) * 6


def _lab(session: Session) -> LabState:
    if session.lab is None:
        raise refusal("Freeze a step first (Tree lab: pick a step, press Freeze this step).")
    return session.lab


def check_frozen(session: Session) -> None:
    """``gr.Error`` unless the lab holds a frozen step (checked before a lab button's outputs change)."""
    _lab(session)


SWEPT_BY = {"budget": BUDGET_METHODS, "mu": GATE_METHODS, "topk": ROOT_WIDTH_METHODS}
"""The lab methods whose trees each swept setting shapes; the chain is swept as TALON."""


def check_sweep(session: Session, field, method) -> None:
    """``gr.Error`` unless the lab holds a frozen step and the lab method's trees read the swept ``field``:
    a sweep of a setting the method ignores (μ for EAGLE-2, K for a static tree) drew flat lines."""
    check_frozen(session)
    method = "talon" if method == "chain" else method
    if field in SWEPT_BY and method not in SWEPT_BY[field]:
        names = [METHOD_NAMES[m] for m in SWEPT_BY[field]]
        readers = ", ".join(names[:-1]) + f" and {names[-1]}"
        raise refusal(
            f"The {lab_charts.SWEEP_AXIS_NAMES[field]} does not shape the Lab method's trees "
            f"({METHOD_NAMES.get(method, method)}): its sweep would be flat. It shapes {readers} trees: pick one "
            "as the Lab method, or sweep another setting."
        )


def check_rerollable(session: Session) -> None:
    """``gr.Error`` unless the lab holds a frozen step with a tree drawn."""
    if _lab(session).last is None:
        raise refusal("Draw a tree first (move a setting).")


def check_freezable(session: Session) -> None:
    """``gr.Error`` unless the session holds an ended run with steps to freeze."""
    _trace_for_lab(session)


def _trace_for_lab(session: Session) -> RunTrace:
    trace = session.trace
    if trace is None or not trace.steps:
        raise refusal("No run to freeze a step of: run or load a trace in the Explore tab first.")
    if session.live is not None and not session.live.done:
        raise refusal("The run is still going: freeze a step when it has ended (or press Stop).")
    return trace


def _interactive(fn, *args, progress: gr.Progress | None = None, **kwargs):
    """``fn(*args, **kwargs)`` as an ``INTERACTIVE`` job of the shared queue (before any waiting decode
    step); returns its value and a note when it had to wait."""
    on_wait = (lambda t: progress(0.0, desc=waiting_line(t))) if progress is not None else None
    ticket = COMPUTE.submit(fn, *args, priority=INTERACTIVE, label=f"lab {getattr(fn, '__name__', 'change')}", **kwargs)
    ahead = ticket.ahead  # at submission: what the note counts
    return COMPUTE.wait(ticket, on_wait), waited_note(ticket.waited, ahead)


def frozen_for(
    session: Session, number: int, target_spec, drafter_spec, progress: gr.Progress | None = None
) -> LabState:
    """Step ``number`` (from 1) of the session's run, frozen: the session's lab when it already holds that
    step, else a new ``FrozenStep`` from the run replayed up to the step (``_replayed``; a sync run), or
    from its context prefilled in one piece (an async run, or one that does not replay here).  A run
    made here is frozen with the models it was made with (``Session.specs``), not what the fields hold now;
    a loaded trace with the fields' models."""
    trace = _trace_for_lab(session)
    index = step_number(number, trace) - 1
    if session.specs is not None:
        target_spec, drafter_spec = session.specs
    drafter_spec = (drafter_spec or DEFAULT_DRAFTER).strip()
    lab = session.lab
    if lab is not None and lab.trace is trace and lab.index == index and lab.frozen.drafter_spec == drafter_spec:
        return lab
    target = load_target(target_spec, progress)
    if target.name != trace.target:
        raise refusal(
            f"This run was made with {trace.target}, but the Target field loads {target.name}: set the "
            "Target field to the run's model to explore its steps."
        )
    try:
        replayed = _replayed(trace, index, target, drafter_spec, progress)
        if progress is not None:
            done, what = (1.0, "") if replayed else (0.0, ": reading its context")
            progress(done, desc=f"Freezing step {index + 1}{what}...")
        frozen, _ = _interactive(
            FrozenStep.of_run, target, REGISTRY, drafter_spec, trace, index, replayed=replayed, progress=progress
        )
    except ConfigError as err:
        raise refusal(str(err)) from None
    session.lab = LabState(trace, index, frozen)
    return session.lab


def _replayed(trace: RunTrace, index: int, target, drafter_spec: str, progress: gr.Progress | None):
    """The run's own state at step ``index`` (from 0), its steps before it decoded again one queue job at a
    time (``STEP`` jobs, taking turns with other users' decodes), or None where the run cannot be replayed
    (async, plain decoding, step 1, which the prefill gives exactly) or left its recorded trees."""
    if index == 0 or not replayable(trace, index):
        return None

    def told(run_again: Replay) -> None:
        if progress is not None:
            done = max(run_again.done, 0)  # the prefill counts with the first step
            progress(
                done / (index + 1), desc=f"Freezing step {index + 1}: replaying the run's step {done + 1} of {index}..."
            )

    drafter = make_drafter(trace.tree_config["method"], drafter_spec, target)
    return replay(
        trace,
        target,
        drafter,
        index,
        run=lambda advance: COMPUTE.run(advance, priority=STEP, label="lab replay"),
        on_advance=told,
    )


def gate_view(state: LabState, trace: RunTrace, number: int) -> tuple:
    """TALON's gate of step ``number``'s tree rebuilt with the run's settings, and a line on whether the
    rebuilt tree is the one the run drew."""
    cfg, _ = run_settings(trace)
    step, note = _interactive(state.frozen.explore, cfg, state.index)
    state.last = step
    tok = state.frozen.target.tokenizer
    ran = trace.steps[state.index]
    same = step.tree.token == ran.tree.token and step.tree.parent == ran.tree.parent
    gate = step.gate or []
    gated = any(layer.threshold is not None for layer in gate)
    priced = any(status == CUT_BY_COST for layer in gate for status in layer.status)
    rebuilt = f"Step {number}'s tree, rebuilt at its context with the run's settings " + (
        "(the same tree as the run's)" if same else "(it differs from the run's tree: " + _why_differs(trace) + ")"
    )
    if not step.tree.num_drafts:  # a plain step: no layer was drafted, so there is no gate to read
        return gr.update(value=None, visible=False), (
            f"{rebuilt}: no drafts, a plain decoding step (stopped: {stop_sentence(step, trace.tree_config)}), "
            f"so there is no gate to draw. The Tree lab now holds this step frozen.{note}"
        )
    line = (
        rebuilt
        + ": each band of points is a layer, at its depth (its candidates spread sideways only so that they do not "
        + "overlap); a candidate joins when its path probability is at least μ × the layer's "
        + ("best (the red dashes)" if gated else "best (this tree has no gated layer, so no line is drawn)")
        + (
            "; the first layer is the root's Top-K, with no gate."
            if cfg.topk
            else "; the first layer is gated too (K=0: the root's children pass the gate like any other layer's)."
        )
        + (
            " Candidates marked “cut by the cost rule” passed the gate but would not have paid for their price."
            if priced
            else ""
        )
        + f" The Tree lab now holds this step frozen.{note}"
    )
    fig = lab_charts.gate_figure(gate, cfg.mu, lambda t: token_label(tok, t))
    return gr.update(value=fig, visible=True), line


def _why_differs(trace: RunTrace) -> str:
    if trace.execution == "async":
        return "an async run's drafter drafted from guessed states, the rebuild from the committed ones"
    return (
        "the run did not replay to its own trees here (a trace made on another machine, by other code or with "
        "another drafter), so the step's context was prefilled in one piece, whose last bits differ from the "
        "run's enough to reorder close candidates"
    )


def holds_run_step(session: Session) -> bool:
    """Whether the lab holds a frozen step of the run on show (Explore's gate freezes one)."""
    return session.lab is not None and session.lab.trace is session.trace


def lab_colour_choices(method: str, current: str) -> dict:
    """The lab's colour modes for lab method ``method``: source colours only for the hybrid, the one
    method whose trees hold prompt lookup's nodes beside the model's (``current`` kept where it stays)."""
    modes = [m for m in COLOR_MODES if m != "source" or method == "hybrid"]
    info = colour_help(modes) + ("" if "source" in modes else ". (Source colours need the hybrid lab method.)")
    return gr.update(choices=modes, value=current if current in modes else "relative", info=info)


def status_line(session: Session) -> str:
    """What the lab holds: the frozen step of the session's run (which, its context, root and drafter), or
    ``NOT_FROZEN``."""
    if not holds_run_step(session):
        return NOT_FROZEN
    state = session.lab
    frozen = state.frozen
    root = visible_text(token_label(frozen.target.tokenizer, frozen.root), 30)
    method = state.trace.tree_config.get("method") or "talon"
    run_drafter = state.trace.drafter
    lab_drafter = frozen.drafter_name(method) if run_drafter else ""
    other = (
        f" **The run was drafted by {run_drafter}; the lab grows its trees with {lab_drafter}** (the Drafter "
        "field): its trees are not the run's. Set the Drafter field to the run's drafter and freeze again."
        if run_drafter and lab_drafter != run_drafter
        else ""
    )
    return (
        f"Frozen: **step {state.index + 1} of {len(state.trace.steps)}** ({len(frozen.context)} tokens of "
        f"context, root “{root}”, drafter `{frozen.drafter_spec}`"
        + (
            f", temperature {frozen.temperature:g}: verdicts use the run's own random draws"
            if frozen.temperature
            else ""
        )
        + "). Move the lab's settings below: each change rebuilds this step's tree and verifies it."
        + (
            f" The run sized its trees by the cost rule (N=auto); the lab builds trees of the N you set "
            f"(it starts at {AUTO_RUN_LAB_BUDGET}), and **Draw the price against N** shows which N the rule "
            "picks at this step."
            if state.trace.tree_config.get("auto")
            else ""
        )
        + _depth_limit_note(frozen)
        + other
    )


def _depth_limit_note(frozen: FrozenStep) -> str:
    """What the run's end allows the lab's trees at a frozen step near it (its ``depth_limit``: the deepest
    draft layer, from 1; nothing where it is ``LIMIT_NOTE_DEPTH`` or more, deeper than trees usually grow; a
    tree it stops says so in its caption)."""
    limit = frozen.depth_limit
    if limit is None or limit >= LIMIT_NOTE_DEPTH:
        return ""
    if frozen.plain_only:
        return (
            " **The run had one new token left here**, so every tree at this step is the root alone: a plain "
            "step, as the run's was (freeze an earlier step to compare trees)."
        )
    return (
        f" The run had {limit + 1} new tokens left here, so the lab's trees are drafted at most "
        f"{plural(limit, 'layer')} deep, as the run's were."
    )


def outside_note(asked, number: int, trace: RunTrace) -> str:
    """The status line's note when the step typed (``asked``) is not one of the run's and step ``number``
    was frozen instead (the main sliders say so when they clamp a value; the step box said nothing)."""
    try:
        typed = float(asked)
    except (TypeError, ValueError):
        return ""
    if typed == number:
        return ""
    return f"Step {typed:g} is not one of this run's steps (1 to {len(trace.steps)}), so step {number} was frozen. "


KEPT_SETTINGS = " The lab's settings stay as you left them (the first step frozen of a new run sets them to its own)."
"""The status line's note when Freeze took another step of the run the lab holds."""


@model_work()
def freeze(session: Session, number, target_spec, drafter_spec, progress=gr.Progress()):
    """Freeze step ``number`` (from 1) of the session's run: prefill the target and the drafter at its
    context once.  Returns the status line, the lab's sliders and the step frozen (``number`` clamped to
    the run's steps).  The first step frozen of a run sets the sliders to the run's settings; another step
    of the same run keeps the ones the lab has (a person comparing, say, EAGLE-2 at N=40 over several steps
    had to set it again after every Freeze)."""
    trace = _trace_for_lab(session)
    asked, number = number, step_number(number, trace)
    frozen_for(session, number, target_spec, drafter_spec, progress)
    status = outside_note(asked, number, trace) + status_line(session)  # first: what was not done as asked
    if session.lab_settings_from is trace:
        return status + KEPT_SETTINGS, *(gr.skip() for _ in range(6)), number
    session.lab_settings_from = trace
    cfg = trace.tree_config
    method = cfg.get("method") if cfg.get("method") in dict(LAB_METHOD_CHOICES).values() else "talon"
    # an auto-sized run's N is a cap, and plain decoding and the chain have none: the lab starts at the fixed N
    budget = (budget_setting(cfg) if cfg.get("method") in BUDGET_METHODS else None) or AUTO_RUN_LAB_BUDGET
    return (
        status,
        gr.update(value=method),
        gr.update(value=budget),
        gr.update(value=cfg.get("topk")),
        gr.update(value=cfg.get("mu")),
        gr.update(value=cfg.get("depth")),
        gr.update(value=cfg.get("gamma")),
        number,  # the step box shows the step frozen (a typed step outside the run is clamped)
    )


def follow_gate(session: Session, number, target_spec, drafter_spec, progress=gr.Progress()):
    """After Explore's gate: the lab's status line, sliders and step box as **Freeze** sets them for the
    step the gate froze, or nothing changed where it froze none (a method without a gate)."""
    if not holds_run_step(session):
        return tuple(gr.skip() for _ in range(8))
    return freeze(session, number, target_spec, drafter_spec, progress)


def _price(step: StepRecord) -> float | None:
    """The step's price in plain decoding steps: by the run's cost curve when it had one, else by the cost
    suite's curve for this kind of device (None without either)."""
    if step.price is not None:
        return step.price
    model = cost_model()
    return None if model is None else model.price(len(step.tree), step.call_widths)


def _price_source(state: LabState, short: bool = False) -> str:
    """What the lab's prices come from: this machine's cost curve (the run's, or measured here), else the
    cost suite's table for this kind of device, else ``""``; ``short``: in a table header's few words."""
    if state.frozen.curve is not None:
        return "this machine" if short else "this machine's cost curve"
    if cost_model() is None:
        return ""
    return "cost suite" if short else "the cost suite's table for this kind of device"


@model_work()
def redraw(session: Session, method, budget, topk, mu, depth, gamma, color_mode, progress=gr.Progress()):
    """Rebuild and verify the frozen step's tree with these settings: the tree, a caption, the gate and the
    table of its nodes (what hovering a node shows, for a touch screen or a copy)."""
    state = _lab(session)
    try:
        cfg = tree_config(method, budget, topk, mu, depth, gamma)
        step, note = _interactive(state.frozen.explore, cfg, state.index, progress=progress)
    except (ConfigError, gr.Error) as err:  # settings no tree can be built at: say so, keep the last tree
        return gr.skip(), f"**No tree at these settings**: {getattr(err, 'message', err)}", gr.skip(), gr.skip()
    state.last = step
    tok = state.frozen.target.tokenizer
    mode = colour_mode(color_mode)
    fig = lab_viz_tree(step, mode, cfg)
    cost = _price(step)
    caption = (
        f"**{METHOD_NAMES.get(cfg.method, cfg.method)}** at step {state.index + 1}: {step_shape(step)} → "
        f"“{visible_text(committed_label(step), 40)}”; {plural(step.drafter_forwards, 'drafter call')}"
        + (
            f"; priced at {cost:.2f} plain decoding steps by {_price_source(state)}, "
            f"{(step.accepted_tokens + 1) / cost:.2f} tokens per plain step of price"
            if cost
            else ""
        )
        + f" (measured here: draft {step.draft_seconds * 1e3:.0f} ms, verify {step.verify_seconds * 1e3:.0f} ms)"
        + f". {lab_stop_line(step, cfg)}{note}"
        + busier_than_priced(step, cost if step.price is not None else None, state.frozen.curve)
    )
    has_gate = any(layer.tokens for layer in step.gate or [])
    gate = lab_charts.gate_figure(step.gate, cfg.mu, lambda t: token_label(tok, t)) if has_gate else None
    return fig, caption, gr.update(value=gate, visible=gate is not None), node_rows(step)


def busier_than_priced(step: StepRecord, price: float | None, curve: CostCurve | None) -> str:
    """A sentence when the rebuilt tree's measured draft + verify time is well over what its price stands
    for on this machine's cost curve (``price`` plain steps x the curve's plain step; ``BUSY_STEP_RATIO``):
    the machine is busier now than when the curve was measured, so the measured times and the prices (and
    the ★ that follows them) disagree.  ``""`` otherwise, or without a price by this machine's curve."""
    if not price or curve is None or not curve.plain:
        return ""
    priced = price * curve.plain
    took = step.draft_seconds + step.verify_seconds
    if took <= BUSY_STEP_RATIO * priced:
        return ""
    return (
        f"\n\n**The machine is busier than when its cost curve was measured**: this tree took {took * 1e3:.0f} ms, "
        f"{took / priced:.1f}× the {priced * 1e3:.0f} ms its price stands for ({price:.2f} plain steps of "
        f"{curve.plain * 1e3:.0f} ms). Prices, the ★ in the table below and auto trees follow the curve; the measured "
        "times follow the load now, one timing each."
    )


def lab_stop_line(step: StepRecord, cfg: TreeConfig) -> str:
    """Why the rebuilt tree stopped growing, in the caption's words."""
    return f"Stopped: {stop_sentence(step, {**vars(cfg)})}."


def lab_viz_tree(step, mode: str, cfg: TreeConfig):
    """The rebuilt tree, titled with the settings it was built with."""
    return tree_figure(
        step,
        mode,
        title=f"Step {step.index + 1}, rebuilt: " + " · ".join(tree_parts(vars(cfg))),
    )


@model_work()
def every_method(session: Session, budget, topk, mu, depth, gamma):
    """TALON, EAGLE-2 and static trees at the same N, and the chain at its length γ, at the frozen step, with
    their prices; the winner (most tokens per unit of price) is marked."""
    state = _lab(session)
    cfg = tree_config("talon", budget, topk, mu, depth, gamma)
    results, _ = _interactive(state.frozen.every_method, cfg)
    rows = {}
    for method in LAB_METHODS:
        step = results.get(method)
        label = METHOD_NAMES[method] if method != "chain" else f"chain (γ={cfg.gamma})"
        rows[label] = (
            _reason(method, step)  # why this method builds no tree at these settings
            if isinstance(step, str)
            else {
                "nodes": step.tree.num_drafts,
                "size_note": f"γ, not N={cfg.budget}" if method == "chain" else "",
                "depth": step.tree.max_depth,
                "accepted": step.accepted_tokens,
                "drafter_calls": step.drafter_forwards,
                "cost": _price(step),
                "draft_ms": step.draft_seconds * 1e3,
                "verify_ms": step.verify_seconds * 1e3,
            }
        )
    # the header names the source in short: at 1024 px its whole name wrapped it to six lines (the text
    # above the table names it in full)
    source = _price_source(state, short=True)
    table = lab_charts.methods_table(rows, price_note=f"plain steps, {source}" if source else "plain steps")
    return with_decimals(table, lab_charts.methods_decimals(table))


def _reason(method: str, message: str) -> str:
    """A refusal's message without the method's name it starts with (the table's row already names it)."""
    name = METHOD_NAMES.get(method, method)
    if message.lower().startswith(name.lower()):
        message = message[len(name) :].lstrip(": ")
    return message


def redraw_held(session: Session, method, budget, topk, mu, depth, gamma, color_mode, progress=gr.Progress()):
    """``redraw`` for the step Explore's gate froze; nothing changed where it froze none."""
    if not holds_run_step(session):
        return gr.skip(), gr.skip(), gr.skip(), gr.skip()
    return redraw(session, method, budget, topk, mu, depth, gamma, color_mode, progress)


def every_method_held(session: Session, *settings):
    """``every_method`` for the step Explore's gate froze; nothing changed where it froze none."""
    return every_method(session, *settings) if holds_run_step(session) else gr.skip()


@model_work()
def sweep(session: Session, field, method, budget, topk, mu, depth, gamma):
    """Accepted drafts, depth and widest layer at the frozen step against N, mu or K (EAGLE-2 from K=1)."""
    state, version = _lab(session), session.lab_version
    field = field if field in SWEEP_VALUES else "budget"
    chain = method == "chain"
    method = "talon" if chain else method
    if field == "topk" and method == "eagle2":  # K is swept: a K=0 on the slider must not stop the sweep
        topk = max(topk, 1) if isinstance(topk, (int, float)) else topk
    cfg = tree_config(method, budget, topk, mu, depth, gamma)
    values = [v for v in SWEEP_VALUES[field] if v or field != "topk" or cfg.method != "eagle2"]
    turns = partial(COMPUTE.run, priority=STEP, label="lab sweep")  # its trees take turns with decodes
    rows = state.frozen.sweep(cfg, field, values, run=turns)
    now = f"auto (cap {cfg.budget})" if field == "budget" and cfg.auto else None
    if not _still_current(session, version):  # the settings changed while it was drawn
        return gr.skip()
    swept = " · ".join(tree_parts(vars(cfg))) + (" (the chain has no N, K or μ: swept as TALON)" if chain else "")
    return lab_charts.sweep_figure(rows, field, getattr(cfg, field), now, swept)


# ---- the price of a tree --------------------------------------------------------------------------------------
def price_choices() -> list[tuple[str, str]]:
    """The price chart's curves: this machine's, then every measured device's cost table (a projection)."""
    return [("this machine's cost curve", THIS_MACHINE)] + [
        (f"projection: {label}", key) for key, (label, _) in measured_curves().items()
    ]


@model_work()
def price(session: Session, curve_key, method, budget, topk, mu, depth, gamma, progress=gr.Progress()):
    """Expected committed tokens and price against N at the frozen step (with the price's verification
    share), the N the cost rule picks, the slider's N and what the verifier accepted at each N; priced with
    this machine's cost curve (measured first if there is none: about 40 s on the 2-core CPU) or, as a
    projection, another device's measured cost table."""
    state, version = _lab(session), session.lab_version
    method = method if method in AUTO_METHODS else "talon"
    cfg = tree_config(method, budget, topk, mu, depth, gamma)
    frozen = state.frozen
    if frozen.plain_only:
        return None, (
            "The run had one new token left at this step, so every tree here is the root alone (a plain step) "
            "and its price does not change with N: freeze an earlier step to see which N pays."
        )
    if curve_key and curve_key != THIS_MACHINE:
        curves = measured_curves()
        if curve_key not in curves:
            raise refusal(f"That cost table is no longer in {shown_path(bench_root())}: pick another.")
        label, curve = curves[curve_key]
        projection = True
    else:
        curve = COMPUTE.run(frozen.measure_curve, cfg.method, reporter(progress), priority=STEP, label="lab cost curve")
        label, projection = "this machine's cost curve", False
    rows = []
    turns = partial(COMPUTE.run, priority=STEP, label="lab price")  # its trees take turns with decodes
    for k, n in enumerate(PRICE_BUDGETS):
        progress(k / (len(PRICE_BUDGETS) + 1), desc=f"Building and verifying the tree of N={n}...")
        rows.extend(frozen.sweep(cfg, "budget", [n], curve, run=turns))
    for r in rows:  # the price's verification share: on a GPU it stays flat where drafting calls add up
        r["verify_price"] = curve.verify_ratio(r["size"])  # size: the tree's nodes, root included
    progress(1.0, desc="The tree the cost rule picks...")
    picked = turns(frozen.pick, cfg, curve)
    pick = {"nodes": picked.tree.num_drafts, "expected": picked.expected, "price": picked.price}
    fig = lab_charts.price_figure(rows, int(cfg.budget), pick, label, projection, state.index + 1)
    warning = "" if projection else curve_warning(curve)
    if not _still_current(session, version):  # the settings changed while it was drawn
        return gr.skip(), gr.skip()
    note = price_note(rows, pick, int(cfg.budget), label, projection, curve.price(1, [1]))
    return fig, note + (f"\n\n{warning}" if warning else "")


UNRELIABLE_DROP = 0.8
"""A cost curve whose verify time at a bigger tree is below this share of a smaller tree's was measured
while something else used the machine."""


def curve_warning(curve: CostCurve | None) -> str:
    """A warning when this machine's cost curve was measured while other processes took a share of the
    CPU (``CostCurve.busy``), or does not grow with the tree (a bigger tree measured much cheaper than a
    smaller one: the machine was busy then too), else ``""``."""
    if curve is not None and curve.busy:
        return (
            f"**This machine's cost curve was measured while it was busy**: other processes took "
            f"{curve.other_share:.0%} of the CPU (measured {curve.measured or '?'}), so its prices are higher than "
            "this machine's when quiet and auto trees smaller. Press **Measure this machine again** when the "
            "machine is quiet."
        )
    if curve is None or len(curve.verify) < 2:
        return ""
    for (n0, s0), (n1, s1) in ((a, b) for k, a in enumerate(curve.verify) for b in curve.verify[k + 1 :]):
        if s1 < UNRELIABLE_DROP * s0:
            return (
                f"**This machine's cost curve looks unreliable**: verifying {n1} nodes measured {s1 * 1e3:.0f} ms, "
                f"less than {n0} nodes at {s0 * 1e3:.0f} ms (measured {curve.measured or '?'}, probably while the "
                "machine was busy). Its prices, and the sizes of auto trees, follow it: press **Measure this "
                "machine again** when the machine is quiet."
            )
    return ""


@model_work()
def remeasure(session: Session, method, progress=gr.Progress()):
    """Measure this machine's cost curve again (it replaces the cached one, about 40 s on the 2-core CPU, alone on
    the machine: a job of the shared queue) and say what it found; the price menu turns to this machine's curve,
    the one the chart now draws, so that the next Draw prices with it too."""
    state, version = _lab(session), session.lab_version
    method = method if method in AUTO_METHODS else "talon"
    curve = COMPUTE.run(
        state.frozen.measure_curve, method, reporter(progress), True, priority=STEP, label="lab re-measure"
    )
    fig = bench_charts.cost_figure(curve_frame(curve), f"on this machine (measured {curve.measured})")
    if not _still_current(session, version):  # the curve is cached; the chart was for another step
        return gr.skip(), gr.skip(), gr.skip()
    return fig, measured_note(curve), THIS_MACHINE


def measured_note(curve: CostCurve) -> str:
    """What a fresh measurement of this machine found: the plain step, the cheapest tree and 16, 32, 64
    nodes in plain steps, and whether the curve looks reliable (``curve_warning``)."""
    trees = [point for point in curve.verify if point[0] >= 2] or list(curve.verify)  # a root alone is no tree
    cheapest = min(trees, key=lambda point: (point[1], -point[0]))[0]
    return (
        f"Measured again ({curve.measured}): a plain decoding step {curve.plain * 1e3:.0f} ms; the cheapest tree, "
        f"{cheapest} nodes (root included), costs {curve.verify_ratio(cheapest):.2f} plain steps, 16 nodes "
        f"{curve.verify_ratio(16):.2f}, 32 nodes {curve.verify_ratio(32):.2f}, 64 nodes {curve.verify_ratio(64):.2f} "
        "(the chart)"
        + drafter_note(curve)
        + ". A tree pays where the tokens it commits beat its price; N = auto grows each tree while it does. "
        + (not_kept_note(curve) or curve_warning(curve) or RELIABLE)
    )


RELIABLE = "Its cost rises with the tree's size, as a reliable curve does. Draw the price again to use it."


def not_kept_note(curve: CostCurve) -> str:
    """Where a fresh measurement was not kept (``cost_measure.NOT_KEPT``: the machine was busy), why, and
    what the runs price with instead; else ``""``."""
    if curve.note != NOT_KEPT:
        return ""
    return (
        f"**Not kept**: other processes took {curve.other_share:.0%} of the CPU while it was measured, so its "
        "prices are higher than this machine's when quiet. Runs at N = auto keep the curve measured before; "
        "the chart and this step's prices use the new one. Measure again when the machine is quiet."
    )


def drafter_note(curve: CostCurve) -> str:
    """The drafter's share of a step's price, in plain steps: a call over one node, the step's first call (the
    drafter catching up with the last step's tokens), the tree builder's own work per call and a drafted
    step's bookkeeping, where measured."""
    if not curve.call:
        return ""

    def steps(seconds: float) -> str:
        return f"{seconds / curve.plain:.2f}" if seconds >= 0.005 * curve.plain else "under 0.01"

    parts = [f"a drafter call over one node {steps(curve.call_seconds(1))}"]
    if curve.later:
        parts.append(f"{steps(curve.later_seconds(1))} from a step's third call (its weights still cached)")
    if curve.root:
        parts.append(f"a step's first call {steps(curve.root)}")
    if curve.builder:
        parts.append(f"the tree builder's own work per call {steps(curve.builder)}")
    if curve.observe:
        parts.append(f"a drafted step's bookkeeping {steps(curve.observe)}")
    return "; " + ", ".join(parts)


def curve_frame(curve: CostCurve) -> pd.DataFrame:
    """``curve`` as the cost suite's rows (``bench_charts.cost_figure``): per tree size and per frontier
    width, seconds and the ratio to a plain step."""
    return pd.DataFrame(
        [
            {"component": component, "size": n, "seconds": sec, "ratio": sec / curve.plain, "lm_head_rows": n}
            for component, points in (("target", curve.verify), ("head", curve.call), ("head_later", curve.later))
            for n, sec in points
        ]
    )


def price_note(
    rows: list[dict], pick: dict, your_n: int, label: str, projection: bool, called_root_price: float | None = None
) -> str:
    """A sentence under the price chart: the pick, the slider's N and what the verifier committed there, and
    whether any tree beats plain decoding's one token per plain step.  ``called_root_price``: the root alone
    once the step's first drafter call is made, in plain steps (what the cost rule weighs trees against)."""
    best = max((r for r in rows if r.get("price")), key=lambda r: r["expected"] / r["price"], default=None)
    yours = min(rows, key=lambda r: abs(r["budget"] - your_n)) if rows else None
    text = (
        f"The cost rule would grow **{plural(pick['nodes'], 'draft node')}** here"
        + (
            f" (expected {pick['expected']:.2f} tokens for {pick['price']:.2f} plain steps)"
            if pick.get("price") and pick.get("expected")
            else ""
        )
        + (
            ": the stars. Its tree has its own shape, deeper where the drafter is sure, so it is not a point "
            "of the lines, which are trees filled to each N the lab's way (root width K first)."
            if pick["nodes"] and pick.get("price")
            else "."
        )
    )
    if yours is not None:
        text += (
            f" At N={yours['budget']} (nearest to your N={your_n}) the verifier committed "
            f"{plural(yours['committed'], 'token')}, against {yours['expected']:.2f} expected"
            + (f", for {yours['price']:.2f} plain steps" if yours.get("price") else "")
            + "."
        )
    if best is not None:
        best_ratio = best["expected"] / best["price"]
        pick_ratio = pick["expected"] / pick["price"] if pick.get("price") and pick.get("expected") else None
        text += (
            f" Of the N drawn, N={best['budget']} has the most expected tokens per unit of price "
            f"({best_ratio:.2f} a plain step"
            + (f"; the rule's tree {pick_ratio:.2f}" if pick_ratio is not None else "")
            + ")."
        )
        if pick_ratio is not None and pick_ratio < best_ratio - 0.005 and best["nodes"] > pick["nodes"]:
            text += (
                " The rule decides one layer at a time and stops at the first layer whose likeliest children "
                "do not raise that ratio, so it can stop short of a bigger tree that would (the trees of "
                "the N drawn are filled TALON's way, not by the rule)."
            )
        paying = max(best_ratio, pick_ratio or 0.0)  # the rule's own tree, of its own shape, may pay alone
        if paying < 1.0:
            text += (
                f" **No tree pays at this step on this curve:** each N drawn, and the rule's tree, expects under "
                f"one token per plain step of price (at best {paying:.2f}, under the dotted line at 1 on the left "
                "axis), and plain decoding commits one."
            )
            if pick["nodes"] and called_root_price:
                text += (
                    " The rule grows a tree all the same because it weighs trees against the root alone after "
                    "the step's first drafter call (one token for "
                    f"{called_root_price:.2f} plain steps): each step makes that call to see how sure the "
                    "drafter is, so by then its price is paid."
                )
    if projection:
        text += (
            f" **Projection:** the trees are this machine's, the prices come from {label}; a plain step there is "
            "one target forward of one row, as its cost suite measured it."
        )
    return text


@model_work()
def reroll(session: Session):
    """Verify the tree on show ``REROLLS`` times with fresh random draws (each press its own): the first
    token's histogram next to the target's distribution, and per visited node the chances of acceptance."""
    check_rerollable(session)
    state, version = session.lab, session.lab_version
    frozen, step = state.frozen, state.last
    tok = frozen.target.tokenizer
    state.rerolls += 1  # a new press, new draws (reproducible: the same presses at a step draw the same)
    rolled, _ = _interactive(frozen.reroll, step, REROLLS, seed=len(frozen.context) * 1000 + state.rerolls)
    if not _still_current(session, version):  # the tree it re-rolled is no longer the one on show
        return gr.skip(), gr.skip(), gr.skip()
    table = lab_charts.sampling_table(step, rolled.after, lambda t: token_label(tok, t))
    fig = lab_charts.reroll_figure(rolled.counts, rolled.target, lambda t: token_label(tok, t))
    note = (
        ""
        if frozen.temperature
        else "The run was greedy (temperature 0): these re-rolls sample at temperature "
        "1 to show what sampling verification would do with this tree. "
    )
    bound = rolled.noise_bound()  # exact sampling, simulated: its 99th percentile
    verdict = (
        "the draws agree with the target's distribution, as exact verification should."
        if rolled.total_variation <= bound
        else "the draws are further from the target's distribution than chance explains."
    )
    return (
        fig,
        table,
        f"{note}{REROLLS} re-rolls; total variation from the target's distribution {rolled.total_variation:.3f}; "
        f"exact sampling gives about {rolled.noise_total_variation:.3f} for this distribution and {rolled.rolls} "
        f"draws, and stays under {bound:.3f} 99 times in 100, so {verdict}",
    )
