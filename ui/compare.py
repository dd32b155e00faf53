"""The Compare tab: the same prompt and settings decoded autoregressively, with method A and with
method B; the two trees are shown at the same *output position* (the step of A and the step of B that
committed that token), one above the other, with the three runs side by side in a table."""

from __future__ import annotations

from bisect import bisect_left
from itertools import accumulate

import gradio as gr

from talon import metrics
from talon.config import BUDGET_METHODS, METHOD_NAMES, ConfigError
from talon.trace import RunTrace
from viz import charts, lab_charts, summary
from viz.tree_figure import colour_mode, committed_tokens, shared_extent, tree_figure, visible_text

from .compute import model_work
from .session import Session, stop_tab
from .settings import BUDGET_NODES, SETTING_NAMES, RunSettings, budget_nodes, check, load_models, prepare
from .shared import busy_note, gpu_seconds, refusal, step_number
from .table_view import with_decimals

NO_COMPARE = (
    "Press **Run comparison** to decode the prompt with both methods and with plain decoding, repeated and interleaved."
)


def step_at(trace: RunTrace, position: int) -> int:
    """The index of the step of ``trace`` that committed output token ``position`` (from 1); the last
    step for a position past the end."""
    ends = list(accumulate(len(s.committed_ids) for s in trace.steps))
    return min(bisect_left(ends, position), len(trace.steps) - 1)


def first_position(trace: RunTrace, index: int) -> int:
    """The output position (from 1) of the first token step ``index`` committed."""
    return sum(len(s.committed_ids) for s in trace.steps[:index]) + 1


def token_span(start: int, count: int) -> str:
    """The output positions a step committed, from 1: ``token 31`` for one, ``tokens 31–33`` for three."""
    return f"token {start}" if count == 1 else f"tokens {start}–{start + count - 1}"


VIEW_SIZE = 10
"""How many outputs ``compare_view`` fills."""


def compare_view(session: Session, position, color_mode):
    """Both trees at output token ``position``, on one depth and width scale for every step of both runs
    (so moving along the output never rescales them), the runs' table, the step numbers (from 1) of A and
    B on show for the "go to step" boxes, the verdict of the repetitions and both runs' acceptance per
    depth."""
    traces = session.compare
    a, b = traces.get("A"), traces.get("B")
    runs = [t for t in (a, b) if t is not None and t.steps]
    if not runs:
        return gr.update(), None, None, None, NO_COMPARE, None, gr.update(), gr.update(), "", None
    length = min(len(t.output_ids) for t in runs) or 1
    position = max(1, min(int(position or length), length))
    depth, width = shared_extent([s for t in runs for s in t.steps])  # one scale for every step of both runs
    mode = colour_mode(color_mode)
    figs, numbers = [], []
    for label, trace in (("A", a), ("B", b)):
        if trace is None or not trace.steps:
            figs.append(None)
            numbers.append(gr.update())
            continue
        step = trace.steps[step_at(trace, position)]
        numbers.append(gr.update(value=step.index + 1, maximum=len(trace.steps)))  # past it: clamped, with a note
        start = first_position(trace, step.index)
        title = (
            f"{label}: {run_name(trace)} · step {step.index + 1} of "
            f"{len(trace.steps)} · {token_span(start, len(step.committed_ids))}"
        )
        figs.append(tree_figure(step, mode, title=title, max_depth=depth, max_width=width))
    token = runs[0].output_text and _token_text(runs[0], position)
    caption = f"Output token {position} of {length} (“{token}”): the step of each run that committed it."
    slider = gr.update(minimum=1, maximum=max(length, 2), value=position, interactive=length > 1)
    runs_by_label = {k: traces[k] for k in ("ar", "A", "B") if k in traces and traces[k].steps}
    names = {k: f"{k}: {run_name(t)}" for k, t in runs_by_label.items()}
    labelled = {names[k]: t for k, t in runs_by_label.items()}
    seconds = repeat_seconds(session)
    table = summary.comparison_table(labelled, {names[k]: seconds.get(k, []) for k in runs_by_label})
    methods = {k: v for k, v in labelled.items() if not k.startswith("ar")}
    adaptation = lab_charts.adaptation_figure(methods)
    acceptance = charts.acceptance_per_depth_chart(methods)
    shown = with_decimals(table, summary.COMPARISON_DECIMALS)
    return slider, figs[0], figs[1], shown, caption, adaptation, *numbers, verdict_markdown(session), acceptance


def run_name(trace: RunTrace) -> str:
    """A run's method, with its Budget N where it has one (``TALON, N=auto (cap 128)``): A and B can be one
    method at two sizes."""
    cfg = trace.tree_config
    name = METHOD_NAMES.get(cfg["method"], cfg["method"])
    return f"{name}, {summary.budget_text(cfg)}" if cfg["method"] in BUDGET_METHODS else name


def blank(budget) -> bool:
    """Whether a side's Budget N box is left to the panel's Budget N (None or blank)."""
    return budget is None or (isinstance(budget, str) and not budget.strip())


def side_settings(settings: RunSettings, method, budget) -> RunSettings:
    """The panel's settings for one side of the comparison: its method, and its own Budget N where one is
    given (None or blank: the panel's; "auto" is 0, the auto position)."""
    if blank(budget):
        return settings.but(method=method)
    if isinstance(budget, str) and budget.strip().lower() == "auto":
        budget = 0
    return settings.but(method=method, budget=budget)


def _token_text(trace: RunTrace, position: int) -> str:
    step = trace.steps[step_at(trace, position)]
    offset = position - first_position(trace, step.index)
    texts = committed_tokens(step)
    return visible_text(texts[offset]) if 0 <= offset < len(texts) else ""


def check_compared(session: Session, which: str = "A") -> None:
    """``gr.Error`` unless run ``which`` (A or B) of the comparison is there."""
    trace = session.compare.get(which)
    if trace is None or not trace.steps:
        raise refusal("Run the comparison first.")


def go_to_step(session: Session, which: str, number, color_mode):
    """The view at the first token of step ``number`` (from 1) of run A or B."""
    check_compared(session, which)
    trace = session.compare[which]
    index = step_number(number, trace) - 1
    return compare_view(session, first_position(trace, index), color_mode)


REPEATS = 3
"""Repetitions of the Compare runs by default (each one: autoregressive, A, B, interleaved)."""
DEFAULT_METHODS = ("talon", "talon")
"""Method A and method B when the tab opens: TALON twice, at ``DEFAULT_BUDGETS``."""
DEFAULT_BUDGETS = ("24", "auto")
"""A's and B's Budget N boxes when the tab opens: TALON spending a fixed 24 nodes every step (the size the
fixed-size methods and the Tree lab start at) against TALON sized by the cost rule, the lesson of the tab
in one click: the fixed tree commits more tokens a step, the sized one more tokens a second where a big
tree costs more than it earns (on a 2-core CPU).  Two different methods at N = auto, e.g. EAGLE-2 and
TALON, often draw the same small trees there.  Both boxes are set, so the pair stays a contrast whatever
the panel's N."""


def side_budget_rule(side: str) -> str:
    """What a side's Budget N box takes, in its refusal (the panel's rule leaves out the blank)."""
    return f"{side}'s Budget N is blank (the Budget N above), auto, or {BUDGET_NODES}"


def check_compare(method_a, method_b, budget_a, budget_b, *panel) -> None:
    """``gr.Error`` before anything runs (or the page changes) if the settings ``panel`` (``SETTING_NAMES``)
    cannot run with method A at its Budget N (``budget_a``; blank: the panel's) or with method B at its."""
    settings = RunSettings.of(panel)
    for label, method, budget in (("A", method_a, budget_a), ("B", method_b, budget_b)):
        if not blank(budget):  # the side's own box, refused with what it takes (the panel's rule has no blank)
            try:
                budget_nodes(budget, side_budget_rule(label))
            except ConfigError as err:
                raise refusal(str(err)) from None
        check(side_settings(settings, method, budget), f"Method {label}: ")


@model_work()
def load_compare_models(method_a, method_b, budget_a, budget_b, *panel) -> None:
    """Load the target and both methods' drafters of the settings ``panel`` (``SETTING_NAMES``) before the
    page changes (``load_models``: a model that cannot load leaves the last comparison on show)."""
    load_models(RunSettings.of(panel), (method_a, method_b))


def _compare_seconds(session, method_a, method_b, budget_a, budget_b, color_mode, repeats, *panel) -> int:
    runs = 3 * max(1, int(repeats or 1))
    return gpu_seconds(RunSettings.of(panel[-len(SETTING_NAMES) :]).max_new, "talon", runs=runs)


@model_work(duration=_compare_seconds)
def run_compare(
    session: Session, method_a, method_b, budget_a, budget_b, color_mode, repeats, progress=gr.Progress(), *panel
):
    """Decode the settings ``panel`` (``SETTING_NAMES``; its method is replaced, and its Budget N by
    ``budget_a`` / ``budget_b`` where given: one method at two sizes compares too) autoregressively (for the
    speedup), with method A and with method B, ``repeats`` times, interleaved (ar, A, B, ar, A, B, ...), so
    a busy spell of the machine hits all three alike; both methods' settings are checked before anything
    runs.  The trees shown are the first repetition's (greedy runs repeat the same trees); the table and
    the verdict use every repetition's wall time.  Stop (``stop_compare``, or the tab closing) ends it after
    the run in flight; the repetitions that ran to their end stay on show (none: the last comparison
    does)."""
    check_compare(method_a, method_b, budget_a, budget_b, *panel)
    settings = RunSettings.of(panel)
    repeats = max(1, min(int(repeats or 1), MAX_REPEATS))
    # asked: the repetitions the verdict waits for (those that ran, once Stop ends it)
    state = {"repeats": {"ar": [], "A": [], "B": []}, "settings": settings, "asked": repeats}
    stop = session.claim_work("compare")
    sides = {
        "ar": settings.but(method="ar"),
        "A": side_settings(settings, method_a, budget_a),
        "B": side_settings(settings, method_b, budget_b),
    }
    position = 1  # the output token on show, from 1
    try:
        for rep in range(repeats):
            runs = {}  # this repetition's, compared once all three have run to their end
            for k, (label, side) in enumerate(sides.items()):
                name = "autoregressive decoding" if label == "ar" else f"method {label}"
                done = (rep * len(sides) + k) / (repeats * len(sides))  # runs finished, of every run to make
                progress(done, desc=f"Repetition {rep + 1} of {repeats}: {name}...")
                prepared = prepare(side, progress)
                runs[label] = prepared.run_to_end(stop=stop.is_set)
                if stop.is_set():  # only whole repetitions are compared
                    if rep and session.compare is state:
                        session.compare = {**state, "asked": rep}
                    yield _stopped_view(session, stop, rep, repeats, position, color_mode)
                    return
            # a new state each repetition: the page (and the step slider) never sees a repetition in part
            state = {
                **state,
                "repeats": {label: [*done_runs, runs[label]] for label, done_runs in state["repeats"].items()},
                **(runs if rep == 0 else {}),
            }
            session.compare = state
            a = state["A"]
            position = first_position(a, len(a.steps) // 2) if a.steps else 1
            yield compare_view(session, position, color_mode)
    finally:
        session.finish_work("compare", stop)


def _stopped_view(session: Session, stop, whole: int, repeats: int, position, color_mode) -> tuple:
    """What a stopped comparison leaves: nothing changed where a newer Run replaced it (that run fills the
    page); after Stop or a closed tab, the repetitions that ran to their end under a note saying so (a
    yield that changes nothing where none did: a handler that yields nothing empties its outputs)."""
    if session.replaced("compare", stop):
        return (gr.skip(),) * VIEW_SIZE
    note = stopped_note(whole)
    gr.Info(note)
    if whole == 0 or not session.compare.get("repeats"):  # none ran to its end, or the tab closed
        return (gr.update(),) * VIEW_SIZE
    *view, verdict, acceptance = compare_view(session, position, color_mode)
    return (*view, f"**{note}** (of {repeats} asked for)\n\n{verdict}", acceptance)


MAX_REPEATS = 5


def stopped_note(whole: int) -> str:
    """What Stop leaves on show: the repetitions that ran to their end (the one cut short is dropped)."""
    if whole == 0:
        return "Comparison stopped before its first repetition ended: nothing to compare (the last comparison stays)."
    return (
        f"Comparison stopped: the table and verdict are over the {summary.plural(whole, 'whole repetition')} that ran."
    )


def stop_compare(session: Session) -> None:
    """Compare methods' Stop: the comparison ends after the step it is on."""
    stop_tab(session, "compare")


def same_trees(a: RunTrace, b: RunTrace) -> bool:
    """Whether runs ``a`` and ``b`` drafted the same trees (tokens and parents) step for step and committed the
    same tokens: two methods whose rules agree at these settings."""
    return len(a.steps) == len(b.steps) and all(
        sa.tree.token == sb.tree.token and sa.tree.parent == sb.tree.parent and sa.committed_ids == sb.committed_ids
        for sa, sb in zip(a.steps, b.steps)
    )


def repeat_seconds(session: Session) -> dict[str, list[float]]:
    """Wall seconds of every repetition, by run label."""
    return {k: [t.seconds for t in v] for k, v in session.compare.get("repeats", {}).items()}


def panel_line(trace: RunTrace) -> str:
    """The settings a comparison ran with besides N (each side's label or the verdict says its N): K, μ,
    depth, γ, temperature, tokens, device."""
    cfg, dec = trace.tree_config, trace.decode_config
    temperature = dec.get("temperature") or 0
    return (
        f"K={cfg.get('topk')} · μ={cfg.get('mu'):g} · depth {cfg.get('depth')} · γ={cfg.get('gamma')} · "
        + ("greedy" if not temperature else f"T={temperature:g}, seed {dec.get('seed')}")
        + f" · max {summary.plural(dec.get('max_new_tokens'), 'new token')} · {trace.device}"
    )


def priced_speed_line(a: RunTrace, b: RunTrace) -> str:
    """Why one side is faster, in the cost rule's terms: each run's tokens a step (MAT) over its mean price
    a step in plain decoding steps (this machine's cost curve) is its predicted speed over plain decoding.
    ``""`` unless every step of both runs is priced (a fixed-size run is priced only where a curve was
    cached before it ran)."""
    parts = []
    for label, trace in (("A", a), ("B", b)):
        price = metrics.mean_price(trace.steps)
        if not price:
            return ""
        tokens = metrics.mat(trace.steps)
        parts.append(f"{label} {tokens:.2f} ÷ {price:.2f} = {tokens / price:.2f}×")
    rule = any(t.tree_config.get("auto") for t in (a, b))
    return (
        "**Why**: speed ≈ tokens a step ÷ what a step costs (in plain decoding steps, by this machine's cost "
        f"curve): {', '.join(parts)} plain decoding."
        + (" N = auto grows each tree only while its expected tokens ÷ cost rise." if rule else "")
    )


PLAIN_AGAINST_PLAIN = (
    ": plain decoding itself, timed against the app's own plain run, so its distance from 1.00× is this machine's noise"
)
"""Said after a side that is plain decoding (its speed over plain decoding is no method's doing)."""


def verdict_markdown(session: Session) -> str:
    """What the repetitions say: the speedups over plain decoding (median and spread, at which settings),
    whether A or B is faster in every repetition or the spread is too wide to call, and whether the
    machine was busy."""
    runs = session.compare.get("repeats", {})
    seconds = repeat_seconds(session)
    if not seconds.get("A") or not seconds.get("B"):
        return ""
    label = {k: f"{k} ({run_name(session.compare[k])})" for k in ("A", "B")}
    pairs = list(zip(seconds["A"], seconds["B"]))
    ratios = [b / a for a, b in pairs if a > 0]
    n = len(pairs)
    lines = []
    ar = seconds.get("ar", [])
    for k in ("A", "B"):
        speed = metrics.spread([x / y for x, y in zip(ar, seconds[k]) if y > 0])
        lines.append(
            f"**{label[k]}**: {speed['median']:.2f}× plain decoding in this app"
            + (f" (spread {speed['low']:.2f}–{speed['high']:.2f}× over {n} repetitions)" if n > 1 else " (one run)")
            + (PLAIN_AGAINST_PLAIN if session.compare[k].tree_config["method"] == "ar" else "")
        )
    call = metrics.paired_verdict(ratios)
    spread = metrics.spread(ratios)
    asked = session.compare.get("asked", n)
    if n < asked:
        lines.append(f"Repetition {n} of {asked} done: the verdict comes when all {asked} have run.")
    elif n == 1:
        lines.append("One repetition: no spread to judge a winner by; raise the repetitions for a verdict.")
    elif call == "A":
        lines.append(f"**{label['A']} was faster in all {n} repetitions** (B took {spread['median']:.2f}× A's time).")
    elif call == "B":
        lines.append(
            f"**{label['B']} was faster in all {n} repetitions** (A took {1 / spread['median']:.2f}× B's time)."
        )
    elif call in ("A narrowly", "B narrowly"):
        win, other = ("A", "B") if call == "A narrowly" else ("B", "A")
        ratio = spread["median"] if win == "A" else 1 / spread["median"]
        lines.append(
            f"**{label[win]} was faster in all {n} repetitions**, in some by less than {metrics.SAME_SPEED:.0%} "
            f"(within the noise of one run; {other} took {ratio:.2f}× {win}'s time, median)."
        )
    elif call == "same":
        lines.append(f"**A and B ran at the same speed** (within {metrics.SAME_SPEED:.0%} in every repetition).")
    else:
        lines.append(
            "**No clear winner**: the repetitions disagree (B's time ÷ A's: "
            f"{spread['low']:.2f}–{spread['high']:.2f}); the spread is wider than the difference."
        )
    a, b = session.compare["A"], session.compare["B"]
    why = priced_speed_line(a, b)
    if why:
        lines.append(why)
    if same_trees(a, b):
        lines.append(
            "Both methods drafted **the same tree at every step** here (the same nodes, verdicts and tokens), so "
            "any difference in their speed is the machine's noise, not the method's."
        )
    # N as the side(s) that have one ran it (a plain run's config holds the panel's cap, not a size it used)
    sizes = {summary.budget_text(t.tree_config) for t in (a, b) if t.tree_config["method"] in BUDGET_METHODS}
    settings = panel_line(b)
    if len(sizes) > 1:  # each side's N is in its label
        lines.append(f"Other settings, both methods (each uses those that apply to it): {settings}.")
    else:
        size = f"{sizes.pop()} · " if sizes else ""
        lines.append(f"Settings, both methods (each uses those that apply to it): {size}{settings}.")
    busy = busy_note(runs.get("ar", []), [*runs.get("A", []), *runs.get("B", [])])
    return "  \n".join(lines) + (f"\n\n{busy}" if busy else "")
