"""Figures and tables of the tree lab (``talon.engine.frozen_step``): TALON's gate per layer, every method at
the same step with its price, sweeps of N and mu at one step, the adaptation over a run, and the
sampling re-rolls.  Pure functions of plain data (gate records, tables, counts); no torch."""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence

import pandas as pd
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from talon.trace import RunTrace
from talon.tree import ADMITTED, BELOW_GATE, BEYOND_K, CUT_BY_BUDGET, CUT_BY_COST, GateLayer

from .style import NOTE_HEIGHT, RUN_COLORS, TEMPLATE, centre_note, chart_title, named_hline, new_figure
from .tree_figure import visible_text

STATUS_STYLE = {
    ADMITTED: {"color": "#2E9E44", "symbol": "circle", "size": 10},
    CUT_BY_BUDGET: {"color": "#F58518", "symbol": "x", "size": 10},
    CUT_BY_COST: {"color": "#B279A2", "symbol": "x", "size": 10},
    BELOW_GATE: {"color": "#7D8693", "symbol": "circle-open", "size": 8},
    BEYOND_K: {"color": "#7D8693", "symbol": "diamond-open", "size": 8},
}
TokenText = Callable[[int], str]


LABEL_BACKGROUND = "rgba(255, 255, 255, 0.85)"
"""Behind a line's label on a chart: it stays readable over the markers it crosses."""


def _layout(fig: go.Figure, title: str, height: int = 380, **extra) -> go.Figure:
    fig.layout.template = TEMPLATE  # replaces plotly's default template (update_layout would merge)
    layout = {
        "title": chart_title(title),
        "height": height,
        "margin": {"l": 55, "r": 15, "t": 60, "b": 30},
        # at the figure's foot, which Plotly raises the plot above as far as the legend needs: placed below
        # the plot by a share of its height instead, a legend that wrapped to more rows (a zoomed-in or
        # narrow page) ran into the x axis's title
        "legend": {"orientation": "h", "x": 0.0, "y": 0.0, "yref": "container", "yanchor": "bottom"},
    }
    fig.update_layout(**{**layout, **extra})
    return fig


PLAIN_DECODING = "plain decoding: 1 token per plain step"
"""The price chart's legend name for its line at 1: what plain decoding commits per unit of price."""
PLAIN_STYLE = {"dash": "dot", "color": "#777", "width": 1}


def gate_figure(gate: Sequence[GateLayer], mu: float, token_text: TokenText = str) -> go.Figure:
    """TALON's gate, one column per layer: every candidate's path probability (log scale), marked
    admitted, refused by the gate, cut by the budget or by the cost rule (an auto-sized tree), and the
    gate's line at mu x the layer's best
    (a Top-K root layer has no line and marks candidates past K ``beyond K``; with K=0 the root is
    gated like the rest and has its line)."""
    title = f"TALON's gate per layer: admitted if path prob ≥ μ × the layer's best (μ = {mu:g})"
    if not gate:
        return _layout(new_figure(), title + " (no TALON tree)")
    fig = new_figure()
    for status, style in STATUS_STYLE.items():
        xs, ys, texts = [], [], []
        for layer in gate:
            picked = [k for k, s in enumerate(layer.status) if s == status]
            for j, k in enumerate(picked):
                xs.append(layer.depth + 0.5 * ((j % 7) - 3) / 7)  # spread within the layer's column
                ys.append(math.exp(layer.path_logprobs[k]))
                texts.append(
                    f"{visible_text(token_text(layer.tokens[k]), 24)} (after node {layer.parents[k]}): "
                    f"path prob {math.exp(layer.path_logprobs[k]):.3g}, "
                    f"{math.exp(layer.path_logprobs[k] - layer.best):.3g} of the layer's best"
                )
        if xs:
            fig.add_trace(
                go.Scatter(
                    x=xs,
                    y=ys,
                    mode="markers",
                    name=status,
                    marker=style,
                    hovertext=texts,
                    hovertemplate="%{hovertext}<extra>" + status + "</extra>",
                )
            )
    lines_x, lines_y = [], []
    for layer in gate:
        if layer.threshold is not None:
            lines_x += [layer.depth - 0.42, layer.depth + 0.42, None]
            lines_y += [math.exp(layer.threshold)] * 2 + [None]
    if lines_x:
        fig.add_trace(
            go.Scatter(
                x=lines_x,
                y=lines_y,
                mode="lines",
                name="gate: μ × layer's best",
                line={"color": "#D62728", "width": 2, "dash": "dash"},
                hoverinfo="skip",
            )
        )
    # A fixed width per layer: with one layer, autoscaling would spread one column's points over the chart
    depths = [layer.depth for layer in gate]
    probs = [y for t in fig.data for y in t.y if y is not None and y > 0]
    ticks = log_ticks(min(probs), max(probs)) if probs else {}
    decades = math.log10(max(probs) / min(probs)) if probs else 0.0
    return _layout(
        fig,
        title,
        # taller over many decades: nine in the default 380 px piled a layer's open circles into a column
        height=int(min(GATE_HEIGHT_MAX, 380 + GATE_PX_PER_DECADE * max(0.0, decades - 4))),
        showlegend=True,  # one kind of mark is still a kind the reader must be told
        xaxis={"title": {"text": "layer (depth)"}, "dtick": 1, "range": [min(depths) - 0.6, max(depths) + 0.6]},
        yaxis={"title": {"text": "path probability (log)"}, "type": "log", **ticks},
    )


GATE_PX_PER_DECADE, GATE_HEIGHT_MAX = 30, 560
"""The gate chart grows this many px per decade of path probability past four, up to the most."""


def log_ticks(low: float, high: float, most_decades: float = 3.0) -> dict:
    """A log axis's ticks for probabilities from ``low`` to ``high`` (both > 0): over at most
    ``most_decades`` decades, 1, 2 and 5 times each power of ten, written as decimals (0.5, 0.02); over
    more, one labelled tick a decade.  Plotly's own labels a small range with a digit at every minor tick,
    which stacked into an unreadable column over one layer's few candidates."""
    if high / low > 10**most_decades:
        return {"dtick": 1, "exponentformat": "power"}
    values = [
        m * 10.0**e
        for e in range(math.floor(math.log10(low)) - 1, math.ceil(math.log10(high)) + 1)
        for m in (1, 2, 5)
        if low / 1.5 <= m * 10.0**e <= high * 1.5
    ]
    return {"tickvals": values, "ticktext": [f"{v:.10g}" for v in values]}


METHODS_DECIMALS = {"tokens per unit of price": 2, "measured ms (draft + verify)": 1}
"""Decimals ``methods_table``'s number columns are shown to (``ui.table_view``); its price column, named by
its unit, is shown to ``PRICE_DECIMALS``."""
PRICE_DECIMALS = 2


def methods_decimals(table: pd.DataFrame) -> dict[str, int]:
    """``METHODS_DECIMALS`` with ``table``'s price column (``price (<unit>)``) added."""
    return {**METHODS_DECIMALS, **{c: PRICE_DECIMALS for c in table.columns if str(c).startswith("price (")}}


METHODS_WIDTHS = ["12%", "9%", "13%", "7%", "9%", "8%", "8%", "12%", "10%", "12%"]
"""``methods_table``'s column widths (method, best, draft nodes, depth, accepted, tokens, drafter calls,
price, tokens per unit of price, measured ms): at 1024 px each header on at most four lines."""


def methods_table(rows: Mapping[str, dict], price_note: str = "AR steps") -> pd.DataFrame:
    """Every method at the frozen step: rows keyed by method label, each a dict with ``nodes``,
    ``depth``, ``accepted``, ``drafter_calls``, ``cost`` (the step's price, in plain decoding steps, or
    None), ``draft_ms`` / ``verify_ms`` (measured here) and optionally ``size_note`` (what the size
    counts, e.g. the chain's γ).  Adds tokens per plain step of price, the column that says which tree
    would have won at this step, and marks the winner (★; by measured time when no price is known; ★ tie
    where several share the best).  A row whose value is a string instead of a dict is a method that did
    not run; the string says why."""
    out = []
    for label, r in rows.items():
        if isinstance(r, str):
            out.append({"method": f"{label}: {r}"})
            continue
        tokens = r["accepted"] + 1
        cost = r.get("cost")
        measured = r["draft_ms"] + r["verify_ms"]
        out.append(
            {
                "method": label,
                "draft nodes": f"{r['nodes']} ({r['size_note']})" if r.get("size_note") else r["nodes"],
                "depth": r["depth"],
                "accepted": r["accepted"],
                "tokens this step": tokens,
                "drafter calls": r["drafter_calls"],
                f"price ({price_note})": None if cost is None else round(cost, 2),
                "tokens per unit of price": None if not cost else round(tokens / cost, 2),
                "measured ms (draft + verify)": round(measured, 1),
                "_score": tokens / cost if cost else (tokens / measured if measured else 0.0),
            }
        )
    scored = [row for row in out if "_score" in row]
    if scored:
        best = max(row["_score"] for row in scored)
        tied = sum(row["_score"] == best for row in scored) > 1  # e.g. every method a plain step at a run's end
        for row in scored:
            row["best"] = ("★ tie" if tied else "★ winner") if row["_score"] == best else ""
    for row in scored:
        del row["_score"]
    table = pd.DataFrame(out)
    if "best" in table:  # the answer next to the method: a table wider than the page scrolls
        table = table[["method", "best", *(c for c in table.columns if c not in ("method", "best"))]]
    return table


def price_figure(
    rows: Sequence[dict],
    your_n: int | None = None,
    pick: dict | None = None,
    curve_label: str = "this machine's cost curve",
    projection: bool = False,
    step_number: int | None = None,
) -> go.Figure:
    """The price of a tree at the frozen step against N (``FrozenStep.sweep`` rows over ``budget``, each
    with ``expected``, ``committed`` and ``price``, optionally ``verify_price``: verifying the tree alone,
    root included, in plain steps): the expected committed tokens by the calibrated confidence, what the
    verifier actually committed (accepted + bonus), the price in plain decoding steps (right axis) with its
    verification share where given, and expected tokens per unit of price (what the cost rule maximises).
    A vertical line marks ``your_n`` (the Budget N slider); stars mark ``pick``, the tree the cost rule grows (a dict
    with ``nodes``, ``expected``, ``price``): a tree of its own shape, not a point of the fixed-N curves,
    so it is drawn where its own tokens and price are.  ``projection``: the prices come from another device's
    measured costs (the trees are this machine's), and the title says so."""
    where = f"step {step_number}" if step_number else "this step"
    title = f"The price of a tree at {where}: tokens and price against N ({curve_label})"
    if projection:
        title = f"Projection: the trees of {where} priced with {curve_label}"
    fig = new_figure()
    priced = [r for r in rows if r.get("price")]
    xs = [r["budget"] for r in rows]
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[r.get("expected") for r in rows],
            mode="lines+markers",
            name="expected tokens (calibrated confidence)",
            line={"color": "#4C78A8"},
            hovertemplate="N=%{x}: expected %{y:.2f} tokens<extra></extra>",
        )
    )
    fig.add_trace(
        go.Scatter(
            x=xs,
            y=[r["committed"] for r in rows],
            mode="markers",
            name="committed by the verifier (accepted + bonus)",
            marker={"color": "#2E9E44", "size": 10, "symbol": "circle-open", "line": {"width": 2}},
            hovertemplate="N=%{x}: the verifier committed %{y} tokens<extra></extra>",
        )
    )
    if priced:
        fig.add_trace(
            go.Scatter(
                x=[r["budget"] for r in priced],
                y=[r["expected"] / r["price"] for r in priced],
                mode="lines",
                name="expected tokens ÷ price (the cost rule's measure)",
                line={"color": "#B279A2", "dash": "dash"},
                hovertemplate="N=%{x}: %{y:.2f} expected tokens per plain step of price<extra></extra>",
            )
        )
        fig.add_trace(
            go.Scatter(
                x=[r["budget"] for r in priced],
                y=[r["price"] for r in priced],
                mode="lines+markers",
                name="price (plain decoding steps, right axis)",
                line={"color": "#F58518"},
                yaxis="y2",
                hovertemplate="N=%{x}: costs %{y:.2f} plain steps<extra></extra>",
            )
        )
        verifying = [r for r in priced if r.get("verify_price")]
        if verifying:
            fig.add_trace(
                go.Scatter(
                    x=[r["budget"] for r in verifying],
                    y=[r["verify_price"] for r in verifying],
                    mode="lines",
                    name="of which verifying the tree (right axis)",
                    line={"color": "#F58518", "dash": "dot", "width": 1.5},
                    yaxis="y2",
                    hovertemplate="N=%{x}: verifying alone %{y:.2f} plain steps "
                    "(the rest: drafting and the step's overhead)<extra></extra>",
                )
            )
        # Plain decoding commits one token a step for one plain step: a tree whose expected tokens per unit
        # of price fall below this line loses to it, whatever the cost rule keeps.
        # Named in the legend: a label on the plot sat on the lines of the smallest trees, which crowd there.
        named_hline(fig, 1.0, PLAIN_DECODING, PLAIN_STYLE)
    if your_n:  # a log axis has no N = 0
        # at the foot: the pick's label sits at the top, so near lines never overlap
        _labelled_vline(fig, your_n, f"your N = {your_n}", {"dash": "dot", "color": "#555"}, {"size": 11}, top=False)
    if pick is not None:
        _mark_pick(fig, pick)
    budgets = [n for n in PRICE_TICKS if min(xs, default=1) <= n <= max(xs, default=1)] or [1]
    _layout(
        fig,
        title,
        height=440,
        # a log axis: the choice is made among the small trees (the rule picks a few nodes, the CPU's best
        # fixed N is 4), which a linear axis to 128 squeezed into its first tenth
        xaxis={
            "title": {"text": "budget N (draft nodes, log scale)"},
            "type": "log",
            "range": [math.log10(PLAIN_STEP_X * 0.8), math.log10(max(xs, default=1) * 1.25)],
            "tickvals": budgets,
            "ticktext": [str(n) for n in budgets],
        },
        yaxis={"title": {"text": "tokens a step<br>÷ price: per plain step"}, "rangemode": "tozero"},
        yaxis2={
            "title": {"text": "price (plain decoding steps)"},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
        },
    )
    if not priced:
        note = "no cost curve for this device yet: the first auto run (or this chart's button) measures it"
        fig.add_annotation(centre_note(note, size=None))
    return fig


PICK_COLOUR = "#D62728"
PRICE_TICKS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
"""The price chart's labelled N on its log axis."""
PLAIN_STEP_X = 0.7
"""Where the price chart's log axis draws the cost rule's plain step (no draft node: left of N = 1)."""


def _labelled_vline(fig: go.Figure, x: float, text: str, line: dict, font: dict, top: bool = True) -> None:
    """A vertical line at ``x`` on a log x axis, labelled to its right at the plot's top (or foot) on a
    backdrop that keeps it readable over the markers.  The label is placed by hand: ``add_vline``'s own
    sits at 10^x on a log axis, where an annotation's x is log10 of the value."""
    fig.add_vline(x=x, line=line)
    fig.add_annotation(
        x=math.log10(x),
        y=1.0 if top else 0.0,
        yref="paper",
        xanchor="left",
        yanchor="top" if top else "bottom",
        showarrow=False,
        text=text,
        font=font,
        bgcolor=LABEL_BACKGROUND,
    )


def _mark_pick(fig: go.Figure, pick: dict) -> None:
    """Stars at the cost rule's own tree (``pick``: ``nodes``, ``expected``, ``price``): its expected
    tokens and tokens per unit of price on the left axis, its price in their label (a star on the right
    axis landed on the left one's wherever the two scales met); a plain step (0 nodes) is a labelled line
    left of N = 1 (``PLAIN_STEP_X``: a log axis has no 0)."""
    nodes = pick["nodes"]
    if not nodes or not pick.get("price"):
        line = {"dash": "dash", "color": PICK_COLOUR, "width": 2}
        _labelled_vline(fig, PLAIN_STEP_X, "cost rule: a plain step", line, {"size": 11, "color": PICK_COLOUR})
        return
    expected, price = pick["expected"], pick["price"]
    hover = (
        f"the cost rule's tree: {nodes} draft nodes of its own shape (deeper where the drafter is sure), "
        f"expected {expected:.2f} tokens for {price:.2f} plain steps = {expected / price:.2f} per step"
        "<extra></extra>"
    )
    star = {"color": PICK_COLOUR, "size": 15, "symbol": "star", "line": {"width": 1, "color": "white"}}
    fig.add_trace(
        go.Scatter(
            x=[nodes, nodes],
            y=[expected, expected / price],
            mode="markers",
            name=f"the cost rule's own tree ({nodes} nodes): expected tokens, ÷ price",
            marker=star,
            hovertemplate=hover,
        )
    )
    # a label off to the right on an arrow: text centred over a star near N = 0 was cut at the plot's edge
    # and printed over the markers around it
    fig.add_annotation(
        x=math.log10(nodes),  # the price chart's x axis is a log one
        y=expected,
        text=f"cost rule's tree: {nodes} nodes, {price:.2f} plain steps",
        font={"size": 11, "color": PICK_COLOUR},
        bgcolor=LABEL_BACKGROUND,
        bordercolor=PICK_COLOUR,
        borderwidth=1,
        showarrow=True,
        arrowcolor=PICK_COLOUR,
        ax=50,
        ay=-36,
        xanchor="left",
    )


SWEEP_AXIS_NAMES = {"budget": "budget N (draft nodes)", "mu": "confidence gate μ", "topk": "root width K"}
SWEEP_TITLE_NOTES = {"topk": " (K=0: the gate picks the root's children too)"}
"""A title's note on a swept value that needs one, where the sweep holds it (EAGLE-2's K starts at 1)."""


def sweep_figure(
    rows: Sequence[dict], field: str, current: float | None = None, current_text: str | None = None, swept: str = ""
) -> go.Figure:
    """Accepted drafts and depth reached (left axis, 0 to a few) and the widest layer (right axis, up to
    the budget) at the frozen step against ``field`` (``budget``, ``mu`` on a log scale, or ``topk``); a
    dotted line at the current value, labelled "now: ``current_text``" (default: the value); ``swept``:
    the tree whose setting is swept, in the title's second line (e.g. "EAGLE-2 · N=24 · K=6 · depth 5")."""
    name = SWEEP_AXIS_NAMES.get(field, field)
    fig = new_figure()
    # accepted drafts under the depth, wider: where every layer is accepted the two lines meet, and the
    # depth's thin line drawn over the accepted one's thick one keeps both in view
    for key, label, color, axis, width, size in (
        ("accepted", "accepted drafts", "#2E9E44", "y", 6, 12),
        ("depth", "depth reached (layers)", "#4C78A8", "y", 2, 6),
        ("widest", "widest layer (nodes, right axis)", "#F58518", "y2", 2, 6),
    ):
        fig.add_trace(
            go.Scatter(
                x=[r[field] for r in rows],
                y=[r[key] for r in rows],
                yaxis=axis,
                mode="lines+markers",
                name=label,
                line={"color": color, "dash": "dash" if axis == "y2" else "solid", "width": width},
                marker={"size": size},
                hovertemplate=f"{field}=%{{x}}: {label} %{{y}}<extra></extra>",
            )
        )
    log_x = field == "mu"
    swept_values = [r[field] for r in rows if r[field] and r[field] > 0]
    mu_ticks = log_ticks(min(swept_values), max(swept_values)) if log_x and swept_values else {}
    widest = max((r["widest"] for r in rows), default=1)
    note = SWEEP_TITLE_NOTES.get(field, "") if any(not r[field] for r in rows) else ""  # K=0 swept (not EAGLE-2)
    few = max((max(r["accepted"], r["depth"]) for r in rows), default=0) <= 8  # a tick a unit while they fit
    if current is not None:
        fig.add_vline(x=current, line={"dash": "dot", "color": "#555"})
        # placed by hand: add_vline's own label sits at 10^x on a log axis
        fig.add_annotation(
            x=math.log10(current) if log_x and current > 0 else current,
            y=1.0,
            yref="paper",
            yanchor="bottom",
            showarrow=False,
            text=f"now: {current_text or f'{current:g}'}",
            font={"size": 11, "color": "#555"},
        )
    return _layout(
        fig,
        f"This step's tree against {name}{note}" + (f"<br><sup>{swept}</sup>" if swept else ""),
        height=340,
        xaxis={"title": {"text": name}, "type": "log" if log_x else "linear", **mu_ticks},
        yaxis={"title": {"text": "accepted drafts / depth"}, "rangemode": "tozero", "dtick": 1 if few else None},
        yaxis2={
            "title": {"text": "widest layer (nodes)", "font": {"color": "#F58518"}},
            "overlaying": "y",
            "side": "right",
            "rangemode": "tozero",
            "showgrid": False,
            # whole nodes: plotly lined the ticks up with the left axis's at 1.95, 3.91, 5.86 nodes
            "tickmode": "linear",
            "tick0": 0,
            "dtick": max(1, math.ceil(widest / 5)),
        },
        margin={"l": 55, "r": 60, "t": 60, "b": 30},
    )


def adaptation_figure(traces: Mapping[str, RunTrace]) -> go.Figure:
    """One dot per step: the drafter's top-1 probability at the root (its confidence) against the
    depth the step's tree reached, per run.  TALON grows deeper where the drafter is sure."""
    fig = new_figure()
    for k, (label, trace) in enumerate(traces.items()):
        steps = [s for s in trace.steps if s.root_top1 is not None]
        if not steps:
            continue
        fig.add_trace(
            go.Scatter(
                x=[s.root_top1 for s in steps],
                y=[s.tree.max_depth for s in steps],
                mode="markers",
                name=label,
                marker={"color": RUN_COLORS[k % len(RUN_COLORS)], "size": 8, "opacity": 0.75},
                customdata=[[s.index + 1, s.accepted_tokens, max(s.layer_widths[1:], default=0)] for s in steps],
                hovertemplate="step %{customdata[0]}: top-1 %{x:.2f}, depth %{y}, widest layer %{customdata[2]}, "
                "%{customdata[1]} accepted<extra>" + label + "</extra>",
            )
        )
    drew = bool(fig.data)
    if not drew:  # plain decoding: no drafter, no trees (the other charts say the same, without axes)
        fig.add_annotation(centre_note("no draft trees in this run"))
    return _layout(
        fig,
        "Adaptation: the drafter's confidence at the root vs the depth the tree reached",
        height=340 if drew else NOTE_HEIGHT,
        xaxis={"title": {"text": "drafter's top-1 probability at the root"}, "range": [0, 1.02], "visible": drew},
        yaxis={"title": {"text": "tree depth (draft layers)"}, "rangemode": "tozero", "visible": drew},
    )


def reroll_figure(
    counts: Mapping[int, int], target: Sequence[float], token_text: TokenText = str, top: int = 12
) -> go.Figure:
    """The first token emitted over ``sum(counts)`` re-rolls of one tree's verification next to the
    target's own distribution of that token (``target[token]``), for the most likely tokens."""
    rolls = sum(counts.values())
    tokens = sorted(
        set(counts) | set(sorted(range(len(target)), key=lambda t: -target[t])[:top]), key=lambda t: -target[t]
    )[:top]
    labels = [visible_text(token_text(t), 16) for t in tokens]
    # Tokens that read alike get their ids, so that no two bars share a place on the (categorical) axis.
    labels = [f"{text} ({t})" if labels.count(text) > 1 else text for text, t in zip(labels, tokens)]
    fig = make_subplots(rows=1, cols=1)
    fig.add_trace(
        go.Bar(
            x=labels,
            y=[counts.get(t, 0) / rolls if rolls else 0 for t in tokens],
            name=f"emitted in {rolls} re-rolls",
            marker_color="#4C78A8",
        )
    )
    fig.add_trace(go.Bar(x=labels, y=[target[t] for t in tokens], name="target's probability", marker_color="#F58518"))
    return _layout(
        fig,
        f"First token after the root: {rolls} verifications of this tree vs the target",
        height=340,
        barmode="group",
        # categorical: tokens such as "7" or "2" would otherwise make a numeric axis with ticks between them
        xaxis={"type": "category", "title": {"text": "first token"}},
        yaxis={"title": {"text": "probability"}, "rangemode": "tozero"},
    )


SAMPLING_TABLE_WIDTHS = ["7%", "13%", "36%", "12%", "32%"]
"""``sampling_table``'s column widths: its five columns fit a 1024-px page, headers broken at spaces only."""


def sampling_table(
    step,
    target_probs_after: Mapping[int, Sequence[float]],
    token_text: TokenText = str,
    top: int = 5,
) -> pd.DataFrame:
    """At temperature > 0, per visited node (the accepted path): each child's draft probability, the
    target's probability (= its chance of being accepted once its parent is reached), and the
    residual distribution the next token is drawn from when every child is refused (the target's
    probabilities of the other tokens, renormalised; its ``top`` tokens).  ``target_probs_after[u]``:
    the target's distribution after node u at the run's temperature."""
    tree = step.tree
    kids = tree.children_lists()
    rows = []
    for u in step.accepted_path:
        p = target_probs_after.get(u)
        if p is None:
            continue
        children = kids[u]
        taken = {tree.token[c] for c in children}
        rest = 1.0 - sum(p[t] for t in taken)
        residual = (
            sorted(((p[t] / rest, t) for t in range(len(p)) if t not in taken), reverse=True)[:top]
            if rest > 1e-12
            else []
        )
        rows.append(
            {
                "node": u,
                "token": visible_text(step.node_text[u], 16),
                "children: draft prob → chance accepted": "; ".join(
                    f"{visible_text(step.node_text[c], 12)} {math.exp(tree.draft_logprob[c]):.2f} "
                    f"→ {p[tree.token[c]]:.2f}"
                    for c in children
                )
                or "(leaf)",
                "all children refused": round(rest, 3),
                "then drawn from (residual, top)": ", ".join(
                    f"{visible_text(token_text(t), 12)} {q:.2f}" for q, t in residual
                ),
            }
        )
    return pd.DataFrame(rows)
