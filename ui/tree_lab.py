"""The Tree lab tab: freeze a step of the run on show, then every change of method, N, K, mu, depth or
gamma rebuilds that step's tree at the same context and verifies it with one target forward
(``talon.engine.frozen_step.FrozenStep``), without re-running the generation.

The frozen step's caches live in the user's session (one frozen step at a time) and go with it."""

from __future__ import annotations

import math

import gradio as gr

from talon.config import ConfigError, TreeConfig
from talon.engine.frozen_step import LAB_METHODS, FrozenStep
from talon.trace import RunTrace, StepRecord
from viz import lab_charts
from viz.tree_figure import COLOR_MODES, tree_figure, visible_text

from .compute import model_work
from .explore import plural
from .session import LabState, Session
from .settings import tree_config
from .shared import DEFAULT_DRAFTER, REGISTRY, SHORT_LABEL, cost_model, load_target

LAB_METHOD_CHOICES = [
    ("TALON", "talon"),
    ("EAGLE-2", "eagle2"),
    ("static tree", "static"),
    ("chain", "chain"),
    ("hybrid (TALON over model + prompt lookup)", "hybrid"),
]
NOT_FROZEN = "No step frozen yet: run (or load) a trace in Explore, pick a step here and press **Freeze this step**."
REROLLS = 200
SWEEP_VALUES = {
    "budget": (4, 8, 12, 16, 24, 32, 48, 64),
    "mu": (0.001, 0.003, 0.01, 0.03, 0.1, 0.3, 1.0),
    "topk": (0, 1, 2, 4, 6, 8, 10, 16),
}
"""The values each "Sweep at this step" field takes (``topk`` 0: the gate picks the root's children)."""


def _lab(session: Session) -> LabState:
    if session.lab is None:
        raise gr.Error("Freeze a step first (Tree lab: pick a step, press Freeze this step).", print_exception=False)
    return session.lab


def _trace_for_lab(session: Session) -> RunTrace:
    trace = session.trace
    if trace is None or not trace.steps:
        raise gr.Error(
            "No run to freeze a step of: run or load a trace in the Explore tab first.", print_exception=False
        )
    if session.live is not None and not session.live.done:
        raise gr.Error(
            "The run is still going: freeze a step when it has ended (or press Stop).", print_exception=False
        )
    return trace


@model_work()
def freeze(session: Session, number, target_spec, drafter_spec, progress=gr.Progress()):
    """Freeze step ``number`` (from 1) of the session's run: prefill the target and the drafter at its
    context once.  Returns the status line and the lab's sliders set to the run's settings."""
    trace = _trace_for_lab(session)
    number = max(1, min(int(number or 1), len(trace.steps)))
    target = load_target(target_spec, progress)
    if target.name != trace.target:
        raise gr.Error(
            f"This run was made with {trace.target}, but the Target field loads {target.name}: set the "
            "Target field to the run's model to explore its steps.",
            print_exception=False,
        )
    index = number - 1
    drafter_spec = (drafter_spec or DEFAULT_DRAFTER).strip()
    try:
        frozen = FrozenStep.of_run(target, REGISTRY, drafter_spec, trace, index)
    except ConfigError as err:
        raise gr.Error(str(err), print_exception=False) from None
    session.lab = LabState(trace, index, frozen)
    root = visible_text(target.tokenizer.decode([frozen.root]), 30)
    cfg = trace.tree_config
    method = cfg.get("method") if cfg.get("method") in dict(LAB_METHOD_CHOICES).values() else "talon"
    status = (
        f"Frozen: **step {number} of {len(trace.steps)}** ({len(frozen.context)} tokens of context, root "
        f"“{root}”, drafter `{drafter_spec}`"
        + (
            f", temperature {frozen.temperature:g}: verdicts use the run's own random draws"
            if frozen.temperature
            else ""
        )
        + "). Move the settings below: each change rebuilds this step's tree and verifies it."
    )
    return (
        status,
        gr.update(value=method),
        gr.update(value=cfg.get("budget")),
        gr.update(value=cfg.get("topk")),
        gr.update(value=cfg.get("mu")),
        gr.update(value=cfg.get("depth")),
        gr.update(value=cfg.get("gamma")),
    )


def _cost(step: StepRecord) -> float | None:
    """The step's price in plain steps: by the run's own cost curve when it had one, else by the newest
    cost suite measured on this kind of device (None without either)."""
    if step.price is not None:
        return step.price
    model = cost_model()
    return None if model is None else model.price(len(step.tree), step.call_widths)


@model_work()
def redraw(session: Session, method, budget, topk, mu, depth, gamma, color_mode):
    """Rebuild and verify the frozen step's tree with these settings: the tree, a caption, the gate."""
    state = _lab(session)
    cfg = tree_config(method, budget, topk, mu, depth, gamma)
    step = state.frozen.explore(cfg, state.index)
    state.last = step
    tok = state.frozen.target.tokenizer
    mode = color_mode if color_mode in COLOR_MODES else "verdict"
    fig = lab_viz_tree(step, mode, cfg)
    cost = _cost(step)
    caption = (
        f"**{SHORT_LABEL.get(cfg.method, cfg.method)}** at step {state.index + 1}: "
        f"{plural(step.tree.num_drafts, 'draft node')} in {plural(step.tree.max_depth, 'layer')} (widest "
        f"{step.tree.widest_layer}), {step.accepted_tokens} accepted + bonus → "
        f"“{visible_text(step.committed_text, 40)}”; {plural(step.drafter_forwards, 'drafter call')}"
        + (
            f"; priced at {cost:.2f} autoregressive steps by this machine's cost model, "
            f"{(step.accepted_tokens + 1) / cost:.2f} tokens per AR-step of cost"
            if cost
            else ""
        )
        + f" (measured here: draft {step.draft_seconds * 1e3:.0f} ms, verify {step.verify_seconds * 1e3:.0f} ms)."
    )
    has_gate = any(layer.tokens for layer in step.gate or [])
    gate = lab_charts.gate_figure(step.gate, cfg.mu, lambda t: tok.decode([t])) if has_gate else None
    return fig, caption, gr.update(value=gate, visible=gate is not None)


def lab_viz_tree(step, mode: str, cfg: TreeConfig):
    """The rebuilt tree, titled with the settings it was built with."""
    return tree_figure(
        step,
        mode,
        title=f"Step {step.index + 1}, rebuilt: {SHORT_LABEL.get(cfg.method)} "
        f"N={cfg.budget}, K={cfg.topk}, μ={cfg.mu:g}",
    )


@model_work()
def every_method(session: Session, budget, topk, mu, depth, gamma):
    """TALON, EAGLE-2, static and chain trees at the same N at the frozen step, with their prices."""
    state = _lab(session)
    cfg = tree_config("talon", budget, topk, mu, depth, gamma)
    results = state.frozen.every_method(cfg)
    rows = {}
    for method in LAB_METHODS:
        step = results.get(method)
        rows[SHORT_LABEL[method]] = (
            "needs root width K >= 1, not run at K=0"
            if step is None
            else {
                "nodes": step.tree.num_drafts,
                "depth": step.tree.max_depth,
                "accepted": step.accepted_tokens,
                "drafter_calls": step.drafter_forwards,
                "cost": _cost(step),
                "draft_ms": step.draft_seconds * 1e3,
                "verify_ms": step.verify_seconds * 1e3,
            }
        )
    return lab_charts.methods_table(rows)


@model_work()
def sweep(session: Session, field, method, budget, topk, mu, depth, gamma):
    """Accepted drafts, depth and widest layer at the frozen step against N, mu or K (EAGLE-2 from K=1)."""
    state = _lab(session)
    field = field if field in SWEEP_VALUES else "budget"
    method = method if method != "chain" else "talon"
    if field == "topk" and method == "eagle2":  # K is swept: a K=0 on the slider must not stop the sweep
        topk = max(topk, 1) if isinstance(topk, (int, float)) else topk
    cfg = tree_config(method, budget, topk, mu, depth, gamma)
    values = [v for v in SWEEP_VALUES[field] if v or field != "topk" or cfg.method != "eagle2"]
    rows = state.frozen.sweep(cfg, field, values)
    return lab_charts.sweep_figure(rows, field, getattr(cfg, field))


@model_work()
def reroll(session: Session):
    """Verify the tree on show ``REROLLS`` times with fresh random draws: the first token's histogram
    next to the target's distribution, and per visited node the chances of acceptance."""
    state = _lab(session)
    if state.last is None:
        raise gr.Error("Draw a tree first (move a setting).", print_exception=False)
    frozen, step = state.frozen, state.last
    tok = frozen.target.tokenizer
    rolled = frozen.reroll(step, REROLLS, seed=len(frozen.context))
    table = lab_charts.sampling_table(step, rolled.after, rolled.temperature, lambda t: tok.decode([t]))
    fig = lab_charts.reroll_figure(rolled.counts, rolled.target, lambda t: tok.decode([t]))
    note = (
        ""
        if frozen.temperature
        else "The run was greedy (temperature 0): these re-rolls sample at temperature "
        "1 to show what sampling verification would do with this tree. "
    )
    return (
        fig,
        table,
        (
            f"{note}{REROLLS} re-rolls; total variation from the target's distribution "
            f"{rolled.total_variation:.3f} (sampling noise alone gives about "
            f"{math.sqrt(8 / REROLLS):.2f} here)."
        ),
    )
