"""The Compare prompts tab, the lesson of the app: two prompts (by default a predictable and an open
example) decoded with the same method and settings, side by side on one scale: a representative tree of
each, their tree-shape heatmaps, the per-step depth and size distributions, acceptance per depth, and a
table of mean depth, widest layer, draft nodes per step, plain steps and MAT.  In class mode the page asks
which prompt will grow deeper trees before it shows any of it."""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import gradio as gr
import pandas as pd

from talon import metrics
from talon.trace import RunTrace
from viz import charts, summary
from viz.tree_figure import colour_mode, shared_extent, tree_figure

from .compute import model_work
from .session import Session, stop_tab
from .settings import SETTING_NAMES, RunSettings, check, prepare
from .shared import (
    DEFAULT_BUDGET,
    DEFAULT_DRAFTER,
    DEFAULT_TARGET,
    DEFAULT_TREE,
    EXAMPLES,
    FALLBACK_EXAMPLES,
    gpu_seconds,
    refusal,
    step_number,
)
from .table_view import node_rows, with_decimals

PAIR_IDS = ("list-1", "chat-1")
"""The shipped example pair: a predictable prompt (a numbered list of the months) and an open one (advice
on sleep)."""
FALLBACK_PAIR = tuple(e["prompt"] for e in FALLBACK_EXAMPLES)
LABELS = ("A", "B")
NO_PROMPTS = (
    "Press **Run both prompts**: each is decoded with the method and settings above, then shown side by side "
    "on one scale."
)
LESSON = (
    "**The lesson of this app.** Two prompts, the same method and settings (above): where the drafter "
    "is sure (lists, code, math), TALON's gate lets few candidates through and the tree grows deep "
    "and narrow; on open chat it stays shallow and wide. At a fixed N both spend the whole budget and "
    "only the shape differs. With N = auto a tree also grows only while it pays on this machine's cost "
    "curve: an unsure step can stay small or be a plain one (no tree), but where a few more nodes cost "
    "almost nothing to verify (a 2-core CPU: up to six) both prompts take them, and again the shape "
    "differs. Both are drawn on one depth and width scale."
)
"""The tab's intro: the answer the class mode asks for, so it shows only outside class mode or once revealed."""
CLASS_INTRO = (
    "**Class mode.** Two prompts, the same method and settings (above). Before anything is shown, the class "
    "predicts which prompt will grow deeper draft trees, and why; the lesson follows the answer."
)


def intro(predict: bool) -> str:
    """The tab's intro for the class mode's checkbox: the lesson, or in class mode a question that does not
    give the answer away (``reveal`` brings the lesson back)."""
    return CLASS_INTRO if predict else LESSON


HIDDEN = (
    "**Both prompts are decoded.** Which one grew deeper trees, A or B, and why? Discuss, answer below, then "
    "press **Reveal**."
)
GUESS_CHOICES = [
    ("A grows deeper trees", "A"),
    ("B grows deeper trees", "B"),
    ("About the same", "same"),
]
SAME_DEPTH = 0.25
"""Mean depths closer than this many layers count as "about the same"."""
SAME_SIZE = 1.15
"""Two auto runs whose draft nodes per step are within this factor count as "about the same" size."""


EDITED = (
    "*The results below are of the prompts as they were run: {which} changed since. Press **Run both prompts** "
    "to decode the pair as it reads now.*"
)


def prompts_edited(session: Session, prompt_a, prompt_b):
    """A prompt was typed into after a pair was run: the caption says the results on show are of the prompts
    as they were run (nothing is cleared: a person comparing an edit with the run before keeps it), and
    reads as before once the prompts read as run again.  Nothing changes while a pair decodes or before one
    has run."""
    runs = _runs(session)
    if session.working("prompts") or len(runs) < 2:
        return gr.skip()
    hidden = session.prompts.get("hidden") and session.prompts.get("guess") is None
    caption = HIDDEN if hidden else prompts_caption(runs)
    changed = [k for k, text in zip(LABELS, (prompt_a, prompt_b)) if runs[k].prompt != text]
    if not changed:
        return caption
    which = "prompt " + changed[0] if len(changed) == 1 else "both prompts"
    return EDITED.format(which=which) + "\n\n" + caption


def example_pair(examples: list[dict] = EXAMPLES) -> tuple[str, str]:
    """The predictable and the open example prompts (``PAIR_IDS``) from the shipped examples."""
    by_id = {e.get("id"): e["prompt"] for e in examples}
    return tuple(by_id.get(i, fallback) for i, fallback in zip(PAIR_IDS, FALLBACK_PAIR))  # type: ignore[return-value]


def pair_chosen(session: Session, prompt_a, prompt_b, predict) -> tuple:
    """The example pair button filled the prompts: the last pair's results, the class's answer and its verdict
    go, as a new Run's would (under the new prompts they read as theirs), and in class mode the question
    comes back.  Nothing changes where the results are already of these prompts, or while a pair decodes
    (its results come of the prompts it runs)."""
    runs = _runs(session)
    if session.working("prompts") or not runs or (runs["A"].prompt, runs["B"].prompt) == (prompt_a, prompt_b):
        return (gr.skip(),) * (len(_empty_view("")) + 3)
    session.prompts = {}
    return (*_empty_view(NO_PROMPTS), "", None, intro(predict))


def use_example_pair(session: Session, predict) -> tuple:
    """The example pair button: both prompt boxes filled with ``example_pair`` and what ``pair_chosen`` makes
    of it, in one answer, so the last pair's results are gone before the boxes' change reaches
    ``prompts_edited`` (which would otherwise note an edit over an emptied tab)."""
    pair = example_pair()
    return (*pair, *pair_chosen(session, *pair, predict))


def category_of(prompt: str, examples: list[dict] = EXAMPLES) -> str:
    """The example category of ``prompt`` (``""`` for a typed prompt)."""
    return next((e.get("category", "") for e in examples if e["prompt"] == prompt), "")


def _runs(session: Session) -> dict[str, RunTrace]:
    return {k: session.prompts[k] for k in LABELS if isinstance(session.prompts.get(k), RunTrace)}


def _prompts_seconds(session, prompt_a, prompt_b, predict, color_mode, *panel) -> int:
    settings = RunSettings.of(panel[-len(SETTING_NAMES) :])
    return gpu_seconds(settings.max_new, settings.method, runs=2)


def check_prompts(prompt_a, prompt_b, *panel) -> None:
    """``gr.Error`` before anything runs (or the page changes) if prompt A or B is empty or the settings
    ``panel`` (``SETTING_NAMES``) cannot run."""
    settings = RunSettings.of(panel)
    for label, prompt in zip(LABELS, (prompt_a, prompt_b)):
        if not isinstance(prompt, str) or not prompt.strip():
            raise refusal(f"Prompt {label} is empty: type one or press the example pair button.")
        check(settings.but(prompt=prompt))  # each prompt's length, and the panel's fields


@model_work(duration=_prompts_seconds)
def run_prompts(session: Session, prompt_a, prompt_b, predict, color_mode, progress=gr.Progress(), *panel):
    """Decode ``prompt_a`` and ``prompt_b`` with the settings ``panel`` (``SETTING_NAMES``; its prompt is
    replaced), one after the other, and show them side by side; with ``predict`` the results stay hidden
    behind the class's guess.  Stop (``stop_prompts``, or the tab closing) ends it after the step in
    flight, with nothing to show (half a pair compares nothing)."""
    check_prompts(prompt_a, prompt_b, *panel)
    settings = RunSettings.of(panel)
    session.prompts = {}
    stop = session.claim_work("prompts")
    runs = {}
    try:
        for k, (label, prompt) in enumerate(zip(LABELS, (prompt_a, prompt_b))):
            # one progress for both panels: each reads it, so it names the pair's place, not a panel's
            progress(k / 2, desc="Prompt A decoding (B next)..." if k == 0 else "Prompt B decoding (A done)...")
            runs[label] = prepare(settings.but(prompt=prompt), progress).run_to_end(stop=stop.is_set)
            if stop.is_set():  # a newer Run fills the page itself; after Stop, nothing of the pair is shown
                replaced = session.replaced("prompts", stop)
                return (gr.skip(),) * len(_empty_view("")) if replaced else _empty_view(STOPPED)
    finally:
        session.finish_work("prompts", stop)
    session.prompts = {**runs, "guess": None, "hidden": bool(predict)}
    return prompts_view(session, color_mode)


STOPPED = "Stopped before both prompts were decoded: press Run both prompts to run the pair again."


def stop_prompts(session: Session) -> None:
    """Compare prompts' Stop: the pair in flight ends after the step it is on."""
    stop_tab(session, "prompts")


RUNNING = "Decoding both prompts with the method and settings above..."


EMPTY_TABLE = "Press Run both prompts to fill this table"
RUNNING_TABLE = "Decoding both prompts: this table fills when both are done"


NODES_EMPTY = "Run both prompts to list this step's nodes"
"""The node tables' one header while there is no tree to list."""


def _no_nodes() -> tuple[pd.DataFrame, pd.DataFrame]:
    """Both node tables empty, each saying what fills it."""
    return pd.DataFrame(columns=[NODES_EMPTY]), pd.DataFrame(columns=[NODES_EMPTY])


def _empty_view(caption: str, table: str | None = EMPTY_TABLE, question: bool = False) -> tuple:
    """The tab with no pair to show: ``caption``, and the table's one header saying what fills it (None: no
    table); with ``question`` the class mode's question in place of the results."""
    return (
        gr.update(visible=not question),
        gr.update(visible=question),
        pd.DataFrame(columns=[table]) if table is not None else None,
        caption,
        *(gr.update(),) * 2,
        *(None,) * 6,
        *_no_nodes(),
    )


def running_view() -> tuple:
    """The tab while a new pair is decoded: the last pair's results cleared (in class mode they would give
    the next answer away)."""
    return _empty_view(RUNNING, RUNNING_TABLE)


def prompts_view(session: Session, color_mode) -> tuple:
    """Everything the tab shows: results (hidden in class mode until the guess), the question, the table,
    the caption, both step sliders, both trees, both heatmaps, the distributions and acceptance per depth."""
    runs = _runs(session)
    if len(runs) < 2:
        return _empty_view(NO_PROMPTS)
    if session.prompts.get("hidden") and session.prompts.get("guess") is None:  # nothing to peek at yet
        return _empty_view(HIDDEN, None, question=True)
    numbers = [typical_step(runs[k]) + 1 for k in LABELS]
    figs, nodes = zip(*(prompt_step(session, k, n, color_mode) for k, n in zip(LABELS, numbers)))
    depth, _ = scale(session)
    heats = [
        charts.tree_shape_heatmap(
            runs[k], max_depth=depth, max_width=widest(runs), title=f"Prompt {k}: nodes per layer, every step"
        )
        for k in LABELS
    ]
    sliders = [
        gr.update(minimum=1, maximum=max(len(runs[k].steps), 2), value=n, interactive=len(runs[k].steps) > 1)
        for k, n in zip(LABELS, numbers)
    ]
    return (
        gr.update(visible=True),
        gr.update(visible=False),
        with_decimals(prompts_table(runs), PROMPTS_DECIMALS),
        prompts_caption(runs),
        *sliders,
        *figs,
        *heats,
        charts.shape_distribution_chart({f"prompt {k}": runs[k] for k in LABELS}),
        charts.acceptance_per_depth_chart({f"prompt {k}": runs[k] for k in LABELS}, max_depth=depth),
        *nodes,
    )


def scale(session: Session) -> tuple[int, float]:
    """The one depth and width scale of both prompts' trees: the deepest and widest over every step of both
    (worked out once per pair of runs and kept in the session: every slider move reuses it)."""
    if "scale" not in session.prompts:
        runs = _runs(session)
        session.prompts["scale"] = shared_extent([s for t in runs.values() for s in t.steps])
    return session.prompts["scale"]


def widest(runs: dict[str, RunTrace]) -> int:
    """The widest layer over both runs (the heatmaps' shared colour scale)."""
    return max((s.tree.widest_layer for t in runs.values() for s in t.steps), default=1) or 1


def typical_step(trace: RunTrace) -> int:
    """The step (from 0) each prompt opens on: one of the depth nearest the run's mean depth, the figure the
    caption compares (``metrics.representative_step``)."""
    return metrics.representative_step(trace.steps, around="mean")


def prompt_step(session: Session, which: str, number, color_mode) -> tuple:
    """Step ``number`` (from 1) of prompt ``which``'s run: its tree on the scale both prompts share, and its
    node table (``viz.tree_figure.node_table``: what hovering the tree shows, as rows to read or copy)."""
    runs = _runs(session)
    trace = runs.get(which)
    if trace is None or not trace.steps:
        return None, _no_nodes()[0]
    number = step_number(number, trace)
    step = trace.steps[number - 1]
    depth, width = scale(session)
    typical = " (depth nearest the mean)" if step.index == typical_step(trace) else ""
    title = (
        f"{which}: step {number} of {len(trace.steps)}{typical} · depth {step.tree.max_depth}, "
        f"widest {step.tree.widest_layer}, {step.tree.num_drafts} drafts"
    )
    mode = colour_mode(color_mode)
    return tree_figure(step, mode, title=title, max_depth=depth, max_width=width), node_rows(step)


def show_prompt_step(session: Session, which: str, number, color_mode) -> tuple:
    """The step slider of prompt A or B moved: redraw that tree (same scale) and list its nodes."""
    if which not in LABELS:
        raise refusal("Pick prompt A or B.")
    check_both_run(session)
    return prompt_step(session, which, number, color_mode)


PROMPTS_DECIMALS = {"mean depth": 2, "draft nodes / step": 1, "MAT": 2}
"""Decimals ``prompts_table``'s number columns show: 2.00 as the caption says it, beside 1.15."""


def prompts_table(runs: dict[str, RunTrace]):
    """Per prompt: its category, mean depth and depth range, widest layer (mean and max), draft nodes per step,
    plain steps, chains, MAT and steps."""
    rows = []
    for label in LABELS:
        trace = runs[label]
        st = metrics.shape_stats(trace.steps)
        rows.append(
            {
                "prompt": f"{label}: {short(trace.prompt)}",
                "category": category_of(trace.prompt) or "typed",
                "mean depth": round(st["mean_depth"], 2),
                "depth range": f"{min(st['depths'], default=0)}–{max(st['depths'], default=0)}",
                "widest layer (mean · max)": f"{st['mean_widest']:.1f} · {st['max_widest']}",
                "draft nodes / step": round(st["mean_nodes"], 1),
                "plain steps": f"{st['plain_share']:.0%}",
                "chains": len(metrics.collapsed_steps(trace)),
                "MAT": round(metrics.mat(trace.steps), 2),
                "steps": st["steps"],
            }
        )
    return pd.DataFrame(rows)


def short(text: str, chars: int = 24) -> str:
    """The first ``chars`` characters of ``text`` on one line (an ellipsis when cut)."""
    flat = " ".join(text.split())
    return flat if len(flat) <= chars else flat[: chars - 1].rstrip() + "…"


def deeper(runs: dict[str, RunTrace]) -> str:
    """Which prompt grew deeper trees on average: ``"A"``, ``"B"`` or ``"same"`` (``SAME_DEPTH``)."""
    a, b = (metrics.mean_tree_depth(runs[k].steps) for k in LABELS)
    if abs(a - b) < SAME_DEPTH:
        return "same"
    return "A" if a > b else "B"


def prompts_caption(runs: dict[str, RunTrace]) -> str:
    """What the two runs show, in a sentence or two, and the settings they share."""
    stats = {k: metrics.shape_stats(runs[k].steps) for k in LABELS}
    a, b = stats["A"], stats["B"]
    winner = deeper(runs)
    if winner == "same":
        head = (
            f"Both prompts grew trees of about the same depth ({a['mean_depth']:.2f} vs {b['mean_depth']:.2f} layers)."
        )
    else:
        other = "B" if winner == "A" else "A"
        gap = stats[winner]["mean_depth"] - stats[other]["mean_depth"]
        head = (
            f"**Prompt {winner} grew deeper trees**: {stats[winner]['mean_depth']:.2f} layers on average against "
            f"{stats[other]['mean_depth']:.2f} ({gap:.2f} layers deeper); widest layer "
            f"{stats[winner]['mean_widest']:.1f} vs {stats[other]['mean_widest']:.1f} nodes."
        )
    shown = {k: runs[k].steps[typical_step(runs[k])].tree.max_depth for k in LABELS}
    spread = (
        f" Depth varies between the steps of one prompt too (A: {min(a['depths'])}–{max(a['depths'])}, "
        f"B: {min(b['depths'])}–{max(b['depths'])}): each tree below is a step of the depth nearest its prompt's "
        f"mean (A: {shown['A']}, B: {shown['B']}), and every figure uses one depth and width scale."
    )
    nodes = [stats[k]["mean_nodes"] for k in LABELS]
    if runs["A"].tree_config.get("auto") and max(nodes) <= SAME_SIZE * min(nodes):
        spread += (
            f" Both used about the same nodes a step ({nodes[0]:.1f} and {nodes[1]:.1f}): the cost rule sizes "
            "a tree by what verifying it costs on this machine, and where a few more nodes cost almost nothing "
            "both prompts take them; the difference is where they go. A fixed Budget N (24, say) shows the "
            "shapes at a larger size."
        )
    if winner != "same" and shown["A"] == shown["B"]:  # the two pictures alike: where the difference shows
        spread += (
            f" Both trees below have depth {shown['A']}: the difference is in how often a step goes deeper, "
            "which the heatmaps under them show step by step."
        )
    return head + spread + f"  \nSame settings for both: {summary.settings_line(runs['A'])}."


def check_both_run(session: Session) -> None:
    """``gr.Error`` unless both prompts have been run."""
    if len(_runs(session)) < 2:
        raise refusal("Run both prompts first.")


def check_reveal(session: Session, guess) -> None:
    """``gr.Error`` unless both prompts have run and an answer is picked."""
    check_both_run(session)
    if guess not in {value for _, value in GUESS_CHOICES}:
        raise refusal("Pick an answer first.")


def reveal(session: Session, guess, color_mode):
    """The class's guess is in: show the results, say whether it was right, and bring the lesson back."""
    check_reveal(session, guess)
    runs = _runs(session)
    session.prompts["guess"] = guess
    truth = deeper(runs)
    said = dict((v, k) for k, v in GUESS_CHOICES)[guess]
    right = "**Right.**" if guess == truth else "**Not this time.**"
    verdict = f"You said: *{said}*. {right} The caption above says by how much."
    return (*prompts_view(session, color_mode), verdict, LESSON)


def export_prompts(session: Session) -> list[str] | None:
    """Both prompts' traces as JSON files (load either in Export / load); none after a pair that was
    stopped."""
    runs = _runs(session)
    if len(runs) < len(LABELS):
        return None
    folder = Path(tempfile.mkdtemp(prefix="talon-prompts-"))
    paths = []
    for label in LABELS:
        path = folder / f"talon_prompt_{label}.json"
        path.write_text(metrics.trace_json(runs[label], indent=1), encoding="utf-8")
        paths.append(str(path))
    return paths


def markdown_table(table: pd.DataFrame) -> str:
    """A DataFrame as a Markdown table (no extra package)."""
    head = "| " + " | ".join(map(str, table.columns)) + " |"
    rule = "| " + " | ".join("---" for _ in table.columns) + " |"
    rows = ["| " + " | ".join(str(v) for v in row) + " |" for row in table.itertuples(index=False)]
    return "\n".join([head, rule, *rows])


def main(argv: list[str] | None = None) -> int:
    """``python -m ui.prompts``: the shipped example pair (``PAIR_IDS``) at the app's defaults for this
    machine, decoded as the Compare prompts tab does, with each prompt's mean depth, widest layer and draft
    nodes per step printed as a Markdown table (tree shapes of greedy runs do not depend on timing)."""
    parser = argparse.ArgumentParser(description=main.__doc__)
    parser.add_argument("--max-new", type=int, default=64, help="new tokens per prompt (the app's default: 64)")
    parser.add_argument("--drafter", default=DEFAULT_DRAFTER)
    parser.add_argument(
        "--budget", type=int, default=DEFAULT_BUDGET, help="Budget N, draft nodes a step, root not counted (0: auto)"
    )
    args = parser.parse_args(argv)
    tree = DEFAULT_TREE
    settings = RunSettings(
        target_spec=DEFAULT_TARGET,
        drafter_spec=args.drafter,
        method=tree.method,
        budget=args.budget,
        topk=tree.topk,
        mu=tree.mu,
        depth=tree.depth,
        gamma=tree.gamma,
        max_new=args.max_new,
    )
    try:
        pair = [settings.but(prompt=p) for p in example_pair()]
        for one in pair:
            check(one)
        runs = {label: prepare(one).run_to_end() for label, one in zip(LABELS, pair)}
    except gr.Error as err:  # the message the page would show: what to fix
        print(f"error: {err.message}", file=sys.stderr)
        return 2
    print(markdown_table(prompts_table(runs)))
    print()
    print(prompts_caption(runs))
    return 0


if __name__ == "__main__":
    sys.exit(main())
